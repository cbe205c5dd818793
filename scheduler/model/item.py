"""Queue items, their buildsets, and the state of one pipeline."""

from __future__ import annotations

import enum
from collections.abc import Iterable, Iterator, Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from scheduler.model.build import Build, BuildsetJobs, JobState, copy_json
from scheduler.model.change import Change
from scheduler.model.reasons import LeaveReason, ResetHistory, Waste
from scheduler.model.results import Result


class MergeState(enum.StrEnum):
    NEW = "NEW"  # no merge requested yet
    PENDING = "PENDING"  # a merge request is out
    COMPLETE = "COMPLETE"  # merged (or failed: see BuildSet.merge_error)


class PushState(enum.StrEnum):
    """Pushing a passed head item's tested merge to its target branch (gating)."""

    NONE = "NONE"  # nothing to push (yet, or the pipeline does not merge)
    PENDING = "PENDING"  # the processing layer is asked to push (Intents.merges_to_push)
    PUSHED = "PUSHED"  # the push landed: the item is reported SUCCESS
    FAILED = "FAILED"  # the push was refused: the item failed


@dataclass
class BuildSet:
    """One attempt at testing an item; a reset replaces it with a new uuid."""

    uuid: str
    merge_state: MergeState = MergeState.NEW
    merge_request: str | None = None
    merge_error: str | None = None
    # commit per project and branch of the speculative state (its own znode)
    repo_state: dict[str, Any] | None = None
    files: list[str] = field(default_factory=list)
    config_errors: list[str] = field(default_factory=list)
    # frozen jobs by name; None until the job graph is frozen
    jobs: dict[str, JobState] | None = None
    result: Result | None = None
    message: str = ""
    # fail-fast (the project's pipeline config, frozen with the jobs): the first
    # voting failure cancels the remaining builds and fails the item at once
    fail_fast: bool = False
    # the commit each branch had before the changes were merged onto it, for
    # the branches the merge moved: trusted steps run from these, never from a
    # speculative commit
    base_state: dict[str, dict[str, str]] = field(default_factory=dict)
    # projects the merge must report besides the changes' (the jobs' required
    # projects and the projects holding their steps, found after freezing)
    required: list[str] = field(default_factory=list)

    def clone(self) -> BuildSet:
        """An equal buildset sharing nothing mutable with this one."""
        new = object.__new__(BuildSet)
        new.__dict__.update(self.__dict__)
        new.repo_state = copy_json(self.repo_state)
        new.files = list(self.files)
        new.config_errors = list(self.config_errors)
        if self.jobs is not None:
            new.jobs = {name: job.clone() for name, job in self.jobs.items()}
        new.base_state = copy_json(self.base_state)
        new.required = list(self.required)
        return new

    @property
    def graph(self) -> BuildsetJobs:
        return BuildsetJobs(self.jobs or {})

    def to_dict(self) -> dict[str, Any]:
        """The buildset node's own data (repo state and jobs live in child nodes)."""
        return {
            "uuid": self.uuid,
            "merge_state": self.merge_state.value,
            "merge_request": self.merge_request,
            "merge_error": self.merge_error,
            "files": self.files,
            "config_errors": self.config_errors,
            "frozen": self.jobs is not None,
            "result": self.result.value if self.result else None,
            "message": self.message,
            "fail_fast": self.fail_fast,
            "base_state": self.base_state,
            "required": self.required,
        }

    @classmethod
    def from_dict(
        cls,
        data: Mapping[str, Any],
        repo_state: dict[str, Any] | None,
        jobs: dict[str, JobState] | None,
    ) -> BuildSet:
        result = data.get("result")
        return cls(
            uuid=str(data["uuid"]),
            merge_state=MergeState(data.get("merge_state", MergeState.NEW.value)),
            merge_request=data.get("merge_request"),
            merge_error=data.get("merge_error"),
            repo_state=repo_state,
            files=list(data.get("files", [])),
            config_errors=list(data.get("config_errors", [])),
            jobs=jobs if data.get("frozen") else None,
            result=Result(result) if result else None,
            message=str(data.get("message", "")),
            fail_fast=bool(data.get("fail_fast", False)),
            base_state={
                str(p): {str(b): str(c) for b, c in branches.items()}
                for p, branches in (data.get("base_state") or {}).items()
            },
            required=[str(p) for p in data.get("required", [])],
        )


@dataclass
class Probe:
    """A run of an item's failed job to judge its failure (scheduler.manager.verdicts).

    ``kind`` says on what: the item's own tested state again (``same-state``),
    or the change alone on its branch's tip (``alone``: merged for it).
    ``uuid`` is the buildset uuid its merge and build requests carry.
    """

    kind: str
    uuid: str
    job: str
    merge_state: MergeState = MergeState.NEW
    merge_request: str | None = None
    merge_error: str | None = None
    repo_state: dict[str, Any] | None = None
    base_state: dict[str, dict[str, str]] = field(default_factory=dict)
    build: Build | None = None

    @property
    def result(self) -> Result | None:
        """Its outcome: its build's result, MERGE_CONFLICT, or None while it runs."""
        if self.merge_error is not None:
            return Result.MERGE_CONFLICT
        if self.build is not None and self.build.done:
            return self.build.result
        return None

    def clone(self) -> Probe:
        new = object.__new__(Probe)
        new.__dict__.update(self.__dict__)
        new.repo_state = copy_json(self.repo_state)
        new.base_state = copy_json(self.base_state)
        new.build = self.build.clone() if self.build is not None else None
        return new

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "uuid": self.uuid,
            "job": self.job,
            "merge_state": self.merge_state.value,
            "merge_request": self.merge_request,
            "merge_error": self.merge_error,
            "repo_state": self.repo_state,
            "base_state": self.base_state,
            "build": self.build.to_dict() if self.build is not None else None,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Probe:
        build = data.get("build")
        return cls(
            kind=str(data["kind"]),
            uuid=str(data["uuid"]),
            job=str(data["job"]),
            merge_state=MergeState(data.get("merge_state", MergeState.NEW.value)),
            merge_request=data.get("merge_request"),
            merge_error=data.get("merge_error"),
            repo_state=data.get("repo_state"),
            base_state={
                str(p): {str(b): str(c) for b, c in branches.items()}
                for p, branches in (data.get("base_state") or {}).items()
            },
            build=Build.from_dict(build) if build else None,
        )


@dataclass
class QueueItem:
    """A change enqueued in a pipeline."""

    uuid: str
    change: Change
    queue: str
    buildset: BuildSet
    enqueue_time: float
    event_id: str = ""
    # dependent pipelines: the item this one is tested on top of
    ahead: str | None = None
    active: bool = True
    # set when the item leaves the pipeline (reported, dequeued, superseded)
    dequeued: bool = False
    reported: bool = False
    result: Result | None = None
    message: str = ""
    # gating pipelines that merge: where the push of the tested merge stands
    push: PushState = PushState.NONE
    # a report that did not land (SQL down): the item stays until it does
    report_failures: int = 0
    report_error: str = ""
    report_retry_at: float | None = None
    # dependent pipelines with ``batch``: the batch the item is tested in ("" none;
    # its members are consecutive items sharing the id, the last one builds) and
    # how many splits of a failed batch made it
    batch: str = ""
    bisect_depth: int = 0
    # the changes of a dependency cycle (allow-circular-dependencies) are
    # consecutive items sharing this id (and ``batch``: the last one merges and
    # builds for all); they are reported, merged or dequeued together
    cycle: str = ""
    # what its failure was judged to be: "flaky" (an item on top of it passed,
    # scheduler.manager.pending; or its job passed again), "culprit", "broken-base"
    # (scheduler.manager.verdicts); "failed": confirmed by the items behind it
    verdict: str = ""
    # the runs that judge its failure (scheduler.manager.verdicts)
    probes: list[Probe] = field(default_factory=list)
    # why it failed or was dequeued (None: not failed, or not yet)
    reason: LeaveReason | None = None
    # the resets it went through (builds and CI seconds thrown away, the last cause)
    resets: ResetHistory = field(default_factory=ResetHistory)
    # the resets its failure or dequeue caused to the items behind it
    reset_cost: Waste = field(default_factory=Waste)

    def clone(self) -> QueueItem:
        """An equal item sharing nothing mutable with this one (its change is frozen).

        The pipeline state cache (:mod:`scheduler.state.items`) keeps a pristine
        item per document version and hands each pass a clone to mutate; an
        item equal (``==``) to its pristine after the pass was not touched.
        """
        new = object.__new__(QueueItem)
        new.__dict__.update(self.__dict__)
        new.buildset = self.buildset.clone()
        if self.probes:
            new.probes = [probe.clone() for probe in self.probes]
        return new

    def probe(self, buildset: str) -> Probe | None:
        """The probe whose requests carry ``buildset`` (None: none of this item's)."""
        return next((p for p in self.probes if p.uuid == buildset), None)

    def tested_state(self, buildset: str) -> tuple[dict[str, Any], dict[str, dict[str, str]], str]:
        """Repo state, base state and merge request of the buildset or probe ``buildset``."""
        probe = self.probe(buildset)
        if probe is not None:
            return probe.repo_state or {}, probe.base_state, probe.merge_request or ""
        tested = self.buildset
        return tested.repo_state or {}, tested.base_state, tested.merge_request or ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "uuid": self.uuid,
            "change": self.change.to_dict(),
            "queue": self.queue,
            "buildset": self.buildset.uuid,
            "enqueue_time": self.enqueue_time,
            "event_id": self.event_id,
            "ahead": self.ahead,
            "active": self.active,
            "dequeued": self.dequeued,
            "reported": self.reported,
            "result": self.result.value if self.result else None,
            "message": self.message,
            "push": self.push.value,
            "report_failures": self.report_failures,
            "report_error": self.report_error,
            "report_retry_at": self.report_retry_at,
            "batch": self.batch,
            "bisect_depth": self.bisect_depth,
            **({"cycle": self.cycle} if self.cycle else {}),
            "verdict": self.verdict,
            **({"probes": [p.to_dict() for p in self.probes]} if self.probes else {}),
            "reason": self.reason.to_dict() if self.reason else None,
            "resets": self.resets.to_dict(),
            "reset_cost": self.reset_cost.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], buildset: BuildSet) -> QueueItem:
        result = data.get("result")
        return cls(
            uuid=str(data["uuid"]),
            change=Change.from_dict(data["change"]),
            queue=str(data.get("queue", "")),
            buildset=buildset,
            enqueue_time=float(data.get("enqueue_time", 0.0)),
            event_id=str(data.get("event_id", "")),
            ahead=data.get("ahead"),
            active=bool(data.get("active", True)),
            dequeued=bool(data.get("dequeued", False)),
            reported=bool(data.get("reported", False)),
            result=Result(result) if result else None,
            message=str(data.get("message", "")),
            push=PushState(data.get("push", PushState.NONE.value)),
            report_failures=int(data.get("report_failures", 0)),
            report_error=str(data.get("report_error", "")),
            report_retry_at=data.get("report_retry_at"),
            batch=str(data.get("batch", "")),
            bisect_depth=int(data.get("bisect_depth", 0)),
            cycle=str(data.get("cycle", "")),
            verdict=str(data.get("verdict", "")),
            probes=[Probe.from_dict(p) for p in data.get("probes") or ()],
            reason=LeaveReason.from_dict(data.get("reason")),
            resets=ResetHistory.from_dict(data.get("resets")),
            reset_cost=Waste.from_dict(data.get("reset_cost")),
        )


class ItemMap(MutableMapping[str, QueueItem]):
    """A pipeline's items by uuid, copied on first write: a pass pays for the items it touches.

    A pass reads a pipeline's state, applies a few events and advances the
    items. Most items are exactly as the last pass left them, and cloning every
    one of them (so the pass may mutate it) made a pass's cost grow with the
    depth of the pipeline. :class:`ItemMap` holds the *pristine* items a state
    was decoded with (:mod:`scheduler.state.items` keeps them per process, and
    nobody may mutate them) and hands out a clone the first time an item is
    looked up through the mapping interface (``state.items[uuid]``, ``get``,
    ``values()``...). The clone is *owned* by the pass from then on: every
    later lookup returns it, and only owned items can differ from what is
    stored.

    Every mapping method is a safe default: code that looks items up gets
    items it may mutate. Code that only reads, over many items, uses
    :meth:`ItemMap.peek` and :meth:`ItemMap.peek_values`, which return the
    owned clone where there is one and the pristine item otherwise; what they
    return must never be mutated (take ``items[uuid]`` for that).
    """

    __slots__ = ("_owned", "_pristine", "_removed", "origin")

    def __init__(
        self,
        items: Mapping[str, QueueItem] | None = None,
        *,
        pristine: Mapping[str, QueueItem] | None = None,
        origin: object = None,
    ) -> None:
        # never mutated (by this class or anyone): shared with the process's cache
        self._pristine: Mapping[str, QueueItem] = pristine if pristine is not None else {}
        self._owned: dict[str, QueueItem] = dict(items) if items else {}
        # pristine uuids that left the map
        self._removed: set[str] = set()
        # what the pristine items came from (the store's snapshot: it writes the owned ones)
        self.origin = origin

    # -- the mapping (every lookup hands out an item the caller may mutate) ----

    def __getitem__(self, uuid: str) -> QueueItem:
        owned = self._owned.get(uuid)
        if owned is not None:
            return owned
        if uuid in self._removed:
            raise KeyError(uuid)
        clone = self._pristine[uuid].clone()
        self._owned[uuid] = clone
        return clone

    def __setitem__(self, uuid: str, item: QueueItem) -> None:
        self._owned[uuid] = item
        self._removed.discard(uuid)

    def __delitem__(self, uuid: str) -> None:
        if uuid not in self:
            raise KeyError(uuid)
        self._owned.pop(uuid, None)
        if uuid in self._pristine:
            self._removed.add(uuid)

    def discard(self, uuid: str) -> None:
        """Remove ``uuid`` if it is here (without cloning a pristine item to drop it)."""
        if uuid in self:
            del self[uuid]

    def __contains__(self, uuid: object) -> bool:
        if uuid in self._owned:
            return True
        return uuid in self._pristine and uuid not in self._removed

    def __iter__(self) -> Iterator[str]:
        removed, owned = self._removed, self._owned
        for uuid in self._pristine:
            if uuid not in removed:
                yield uuid
        for uuid in owned:
            if uuid not in self._pristine:
                yield uuid

    def __len__(self) -> int:
        new = sum(1 for uuid in self._owned if uuid not in self._pristine)
        return len(self._pristine) - len(self._removed) + new

    def __repr__(self) -> str:
        return f"ItemMap({len(self)} items, {len(self._owned)} owned)"

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Mapping):
            return dict(self.peek_items()) == dict(other.items())
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable, as a dict

    # -- reading without taking ownership ---------------------------------------

    def peek(self, uuid: str) -> QueueItem | None:
        """The item for reading only: the owned clone if any, else the pristine one."""
        owned = self._owned.get(uuid)
        if owned is not None:
            return owned
        if uuid in self._removed:
            return None
        return self._pristine.get(uuid)

    def peek_values(self) -> Iterator[QueueItem]:
        """Every item for reading only, in the order of :meth:`__iter__`."""
        for _uuid, item in self.peek_items():
            yield item

    def peek_items(self) -> Iterator[tuple[str, QueueItem]]:
        owned, removed = self._owned, self._removed
        for uuid, item in self._pristine.items():
            if uuid not in removed:
                yield uuid, owned.get(uuid, item)
        for uuid, item in owned.items():
            if uuid not in self._pristine:
                yield uuid, item

    def owns(self, uuid: str) -> bool:
        """Whether ``uuid`` was handed out (or added) in this pass: only these can differ."""
        return uuid in self._owned

    def pristine(self, uuid: str) -> QueueItem | None:
        """The item as it was decoded (None for an item this pass added)."""
        return None if uuid in self._removed else self._pristine.get(uuid)

    def owned_uuids(self) -> list[str]:
        """The items handed out or added: the only ones that can differ from the pristine."""
        return list(self._owned)

    def removed_uuids(self) -> list[str]:
        """Pristine items that left the map."""
        return list(self._removed)

    def rebase(self, pristine: Mapping[str, QueueItem], origin: object) -> None:
        """After a commit: ``pristine`` is what is stored now (the owned items stay owned)."""
        self._pristine = pristine
        self._removed = {uuid for uuid in self._removed if uuid in pristine}
        self.origin = origin


@dataclass
class ChangeQueue:
    """An ordered queue of items (a shared gate queue, or one per item when independent)."""

    name: str
    items: list[str] = field(default_factory=list)
    window: int = 0  # 0: unlimited
    # removed with its last item (independent and supercedent queues)
    dynamic: bool = False
    # a batch waits for more changes until then (scheduler.manager.batches)
    wake_at: float | None = None
    # how many changes a new batch takes now (0: the configured size); halved
    # by a failed batch, doubled by a passed one (scheduler.manager.batches)
    batch_size: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "items": list(self.items),
            "window": self.window,
            "dynamic": self.dynamic,
            "wake_at": self.wake_at,
            **({"batch_size": self.batch_size} if self.batch_size else {}),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ChangeQueue:
        return cls(
            name=str(data["name"]),
            items=[str(i) for i in data.get("items", [])],
            window=int(data.get("window", 0)),
            dynamic=bool(data.get("dynamic", False)),
            wake_at=data.get("wake_at"),
            batch_size=int(data.get("batch_size", 0)),
        )


class Settled(NamedTuple):
    """An item whose step decides nothing (scheduler.manager.settling), and how it stands."""

    # the layout fence it was settled under
    fence: object
    # it will not merge as tested (the walk's "failing": not a nearest non-failing item)
    failing: bool


@dataclass
class PipelineState:
    """Everything a processing pass needs of one pipeline."""

    tenant: str
    pipeline: str
    queues: dict[str, ChangeQueue] = field(default_factory=dict)
    # copied on first lookup (scheduler.model.item_map): peek to only read
    items: ItemMap = field(default_factory=ItemMap)
    layout_uuid: str = ""
    # Zuul's disable-after-consecutive-failures: failed reports in a row, and
    # whether the pipeline reports with its ``disabled`` reporters only
    # (scheduler.manager.actions; kept across reconfigurations)
    consecutive_failures: int = 0
    disabled: bool = False
    # items whose advance decides nothing while they, the items ahead of them
    # and the layout are unchanged: uuid -> the layout fence it holds under
    # (scheduler.state.items keeps it between passes; managers skip them)
    settled: dict[str, Settled] = field(default_factory=dict, compare=False)
    # the fence of the layout the pass's manager comes from (None: settle nothing)
    fence: object = field(default=None, compare=False)

    def items_in_order(self) -> Iterator[QueueItem]:
        for queue in list(self.queues.values()):
            for item_uuid in list(queue.items):
                item = self.items.get(item_uuid)
                if item is not None:
                    yield item

    def items_of(self, queue: ChangeQueue) -> list[QueueItem]:
        """The items of ``queue``, in order."""
        found = [self.items.get(item_uuid) for item_uuid in queue.items]
        return [item for item in found if item is not None]

    def peek_of(self, queue: ChangeQueue) -> list[QueueItem]:
        """The items of ``queue`` in order, for reading only (see ``ItemMap.peek``)."""
        found = [self.items.peek(item_uuid) for item_uuid in queue.items]
        return [item for item in found if item is not None]

    def owned(self, items: Iterable[QueueItem]) -> list[QueueItem]:
        """The pass's own (mutable) copies of ``items`` found by peeking."""
        return [self.items[item.uuid] for item in list(items)]

    def find(self, change: Change) -> list[QueueItem]:
        """Live items of the same change (any patchset)."""
        return self.owned(
            item
            for item in self.items.peek_values()
            if not item.dequeued and item.change.same_change(change)
        )

    def find_for_dequeue(self, change: Change) -> list[QueueItem]:
        """Live items of ``change``'s ref; an empty branch matches any target branch."""
        return self.owned(
            item
            for item in self.items.peek_values()
            if not item.dequeued
            and item.change.connection == change.connection
            and item.change.project == change.project
            and item.change.ref == change.ref
            and (not change.branch or item.change.branch == change.branch)
        )

    def queue_of(self, item: QueueItem) -> ChangeQueue:
        return self.queues[item.queue]

    def remove(self, item: QueueItem) -> None:
        queue = self.queues.get(item.queue)
        if queue is not None and item.uuid in queue.items:
            queue.items.remove(item.uuid)
            if not queue.items and (queue.dynamic or queue.name.startswith("item:")):
                del self.queues[queue.name]
        self.items.discard(item.uuid)
        self.settled.pop(item.uuid, None)

    def summary(self) -> dict[str, Any]:
        """The pipeline node's own data: the layout and how many items there are."""
        return {
            "tenant": self.tenant,
            "pipeline": self.pipeline,
            "layout_uuid": self.layout_uuid,
            "items": len(self.items),
        } | self.disabled_state()

    def disabled_state(self) -> dict[str, Any]:
        """The disable-after-consecutive-failures state, where there is one."""
        found: dict[str, Any] = {}
        if self.consecutive_failures:
            found["consecutive_failures"] = self.consecutive_failures
        if self.disabled:
            found["disabled"] = True
        return found

    def order(self) -> dict[str, Any]:
        """The queues and their items in order (a document of its own: see the codec)."""
        return {"queues": [queue.to_dict() for queue in self.queues.values()]}
