"""What a pipeline pass counts for the metrics, and the totals it adds to.

A manager counts, in its pass, the resets it decided (per queue: how many,
the builds and CI seconds they threw away), the items that left without
success (per reason kind) and how long each item that left was in its
queue. The processing layer adds the pass's :class:`PassTally` to the
pipeline's :class:`PipelineTotals` in the transaction that commits what was
counted (:mod:`scheduler.stores.pipeline_stats`), so a pass that does not
commit counts nothing and one that is repeated counts once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from scheduler.model.reasons import Waste

# Upper bounds (seconds) of the time-in-queue histogram (+Inf is implied).
QUEUE_BUCKETS = (30, 60, 120, 300, 600, 1200, 1800, 3600, 7200, 14400, 28800, 86400)


def queue_label(queue: str, project: str) -> str:
    """A queue's metric label: a queue of one item or ref is named after its project."""
    if queue.startswith(("item:", "ref:")):
        return project
    return queue


@dataclass(frozen=True)
class Batches:
    """Batches of a queue (scheduler.manager.batches): tested, their changes, their splits."""

    tested: int = 0
    changes: int = 0
    bisections: int = 0

    def __add__(self, other: Batches) -> Batches:
        return Batches(
            self.tested + other.tested,
            self.changes + other.changes,
            self.bisections + other.bisections,
        )

    def to_dict(self) -> dict[str, int]:
        return {"tested": self.tested, "changes": self.changes, "bisections": self.bisections}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> Batches:
        data = data or {}
        return cls(
            int(data.get("tested", 0)), int(data.get("changes", 0)), int(data.get("bisections", 0))
        )


@dataclass
class PassTally:
    """What one pass counted (reset to empty when it is committed)."""

    # by queue label
    resets: dict[str, Waste] = field(default_factory=dict)
    # items that left without success, by reason kind
    dequeues: dict[str, int] = field(default_factory=dict)
    # seconds from enqueue to leaving, by queue label
    time_in_queue: dict[str, list[float]] = field(default_factory=dict)
    # by queue label: batches tested, the changes in them, splits of failed ones
    batches: dict[str, Batches] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.resets or self.dequeues or self.time_in_queue or self.batches)

    def batch(self, queue: str, size: int) -> None:
        self.batches[queue] = self.batches.get(queue, Batches()) + Batches(1, size, 0)

    def bisection(self, queue: str) -> None:
        self.batches[queue] = self.batches.get(queue, Batches()) + Batches(0, 0, 1)

    def reset(self, queue: str, waste: Waste) -> None:
        self.resets[queue] = self.resets.get(queue, Waste()) + waste

    def left(self, queue: str, kind: str | None, seconds: float) -> None:
        if kind is not None:
            self.dequeues[kind] = self.dequeues.get(kind, 0) + 1
        self.time_in_queue.setdefault(queue, []).append(max(0.0, seconds))

    def take(self) -> PassTally:
        """What was counted so far; the tally starts again empty."""
        taken = PassTally(self.resets, self.dequeues, self.time_in_queue, self.batches)
        self.resets, self.dequeues, self.time_in_queue, self.batches = {}, {}, {}, {}
        return taken


@dataclass(frozen=True)
class QueueTimes:
    count: int = 0
    total: float = 0.0
    # cumulative counts, one per bound of QUEUE_BUCKETS
    buckets: tuple[int, ...] = (0,) * len(QUEUE_BUCKETS)

    def with_samples(self, samples: Sequence[float]) -> QueueTimes:
        buckets = list(self.buckets)
        for value in samples:
            for index, bound in enumerate(QUEUE_BUCKETS):
                if value <= bound:
                    buckets[index] += 1
        total = round(self.total + sum(samples), 3)
        return QueueTimes(self.count + len(samples), total, tuple(buckets))

    def to_dict(self) -> dict[str, Any]:
        return {"count": self.count, "sum": self.total, "buckets": list(self.buckets)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> QueueTimes:
        buckets = [int(b) for b in (data or {}).get("buckets") or []]
        if not data or len(buckets) != len(QUEUE_BUCKETS):
            return cls()
        return cls(int(data.get("count", 0)), float(data.get("sum", 0.0)), tuple(buckets))


@dataclass(frozen=True)
class PipelineTotals:
    """A pipeline's counters since it was created (its stats document)."""

    resets: Mapping[str, Waste] = field(default_factory=dict)
    dequeues: Mapping[str, int] = field(default_factory=dict)
    time_in_queue: Mapping[str, QueueTimes] = field(default_factory=dict)
    batches: Mapping[str, Batches] = field(default_factory=dict)

    def plus(self, tally: PassTally) -> PipelineTotals:
        resets = dict(self.resets)
        for queue, waste in tally.resets.items():
            resets[queue] = resets.get(queue, Waste()) + waste
        dequeues = dict(self.dequeues)
        for kind, count in tally.dequeues.items():
            dequeues[kind] = dequeues.get(kind, 0) + count
        times = dict(self.time_in_queue)
        for queue, samples in tally.time_in_queue.items():
            times[queue] = times.get(queue, QueueTimes()).with_samples(samples)
        batches = dict(self.batches)
        for queue, counted in tally.batches.items():
            batches[queue] = batches.get(queue, Batches()) + counted
        return PipelineTotals(resets, dequeues, times, batches)

    def to_dict(self) -> dict[str, Any]:
        return {
            "resets": {q: w.to_dict() for q, w in self.resets.items()},
            "dequeues": dict(self.dequeues),
            "time_in_queue": {q: h.to_dict() for q, h in self.time_in_queue.items()},
            **(
                {"batches": {q: b.to_dict() for q, b in self.batches.items()}}
                if self.batches
                else {}
            ),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> PipelineTotals:
        data = data or {}
        return cls(
            resets={str(q): Waste.from_dict(w) for q, w in (data.get("resets") or {}).items()},
            dequeues={str(k): int(n) for k, n in (data.get("dequeues") or {}).items()},
            time_in_queue={
                str(q): QueueTimes.from_dict(h)
                for q, h in (data.get("time_in_queue") or {}).items()
            },
            batches={str(q): Batches.from_dict(b) for q, b in (data.get("batches") or {}).items()},
        )
