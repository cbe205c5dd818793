"""The timer driver: periodic pipelines, one generator by election.

A pipeline triggers on a connection whose driver is ``timer`` with Zuul's
filter ``time``: a cron spec of five fields (minute hour day month
weekday), an optional sixth for seconds and an optional seventh for
jitter in seconds::

    trigger:
      timer:
        - time: '0 3 * * *'          # every day at 03:00
        - time: '*/10 * * * * 30'    # every ten minutes, at second 30
        - time: '0 * * * * 0 60'     # hourly, spread over a minute

Only the holder of the timer lock (``/timer/lock``) fires; if it dies its
lock goes with its session and another maintenance worker's generator
takes over. When a spec comes due, the generator enqueues an item for
every project and branch that runs jobs in the pipeline (Zuul's periodic
pipelines test branch heads), into the pipeline's trigger queue, and
records the firing time in ``/timer/state``, all in ONE transaction fenced
by the lock: a firing happens once, whoever holds the lock. A generator
that was away (all maintenance workers down) fires once for the latest
missed time within :data:`CATCH_UP` seconds, not for every missed one.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from scheduler.layouts import TenantLayout
from scheduler.model.change import Change
from scheduler.wire.events import Enqueue
from scheduler.zk import paths, stored
from scheduler.zk.errors import NoDataError
from scheduler.zk.event_queue import EventQueue
from scheduler.zk.locks import HeldLock

log = logging.getLogger(__name__)

# A firing missed by more than this is skipped (only the latest is made up for).
CATCH_UP = 300
FIELDS = (
    ("minute", 0, 59),
    ("hour", 0, 23),
    ("day", 1, 31),
    ("month", 1, 12),
    ("weekday", 0, 6),
)


class CronError(ValueError):
    """A ``time`` spec that cannot be read."""


def _field(text: str, name: str, low: int, high: int) -> frozenset[int]:
    values: set[int] = set()
    for part in text.split(","):
        body, _, step_text = part.partition("/")
        try:
            step = int(step_text) if step_text else 1
            if body == "*":
                start, end = low, high
            elif "-" in body:
                first, last = body.split("-", 1)
                start, end = int(first), int(last)
            else:
                start = int(body)
                end = high if step_text else start
        except ValueError:
            raise CronError(f"{name}: {part!r} is not a number, range or */step") from None
        if step < 1 or not low <= start <= end <= high:
            raise CronError(f"{name}: {part!r} is outside {low}-{high}")
        values.update(range(start, end + 1, step))
    return frozenset(values)


@dataclass(frozen=True)
class CronSpec:
    text: str
    minute: frozenset[int]
    hour: frozenset[int]
    day: frozenset[int]
    month: frozenset[int]
    weekday: frozenset[int]
    second: frozenset[int]
    jitter: int = 0
    # cron's rule: with both day and weekday restricted, either may match
    either_day: bool = False

    @classmethod
    def parse(cls, text: str) -> CronSpec:
        parts = text.split()
        if not 5 <= len(parts) <= 7:
            raise CronError(f"{text!r}: expected 5 fields (6 with seconds, 7 with jitter)")
        minute, hour, day, month, weekday = (
            _field(p, *spec) for p, spec in zip(parts, FIELDS, strict=False)
        )
        # cron's weekday 7 is Sunday, as 0
        second = _field(parts[5], "second", 0, 59) if len(parts) > 5 else frozenset({0})
        try:
            jitter = int(parts[6]) if len(parts) > 6 else 0
        except ValueError:
            raise CronError(f"{text!r}: jitter must be a number of seconds") from None
        either = parts[2] != "*" and parts[4] != "*"
        return cls(
            text,
            minute,
            hour,
            day,
            month,
            weekday,
            second=second,
            jitter=max(0, jitter),
            either_day=either,
        )

    def matches(self, moment: float) -> bool:
        """Whether the UTC second ``moment`` is one the spec names."""
        t = time.gmtime(int(moment))
        weekday = (t.tm_wday + 1) % 7  # cron: Sunday is 0
        day_ok = t.tm_mday in self.day
        weekday_ok = weekday in self.weekday
        days = (day_ok or weekday_ok) if self.either_day else (day_ok and weekday_ok)
        return (
            days
            and t.tm_sec in self.second
            and t.tm_min in self.minute
            and t.tm_hour in self.hour
            and t.tm_mon in self.month
        )

    def latest(self, after: float, until: float, offset: int = 0) -> float | None:
        """The latest second in (``after``, ``until``] the spec names, shifted by ``offset``."""
        start = max(int(after) + 1, int(until) - CATCH_UP)
        for moment in range(int(until), start - 1, -1):
            if self.matches(moment - offset):
                return float(moment)
        return None


def jitter_of(key: str, jitter: int) -> int:
    """A stable delay in [0, jitter] for one trigger (spreads pipelines over the window)."""
    if jitter <= 0:
        return 0
    return int(hashlib.sha256(key.encode()).hexdigest(), 16) % (jitter + 1)


@dataclass(frozen=True)
class Timer:
    tenant: str
    pipeline: str
    spec: CronSpec

    @property
    def key(self) -> str:
        return f"{self.tenant}/{self.pipeline}/{self.spec.text}"


def timers_of(layout: TenantLayout) -> list[Timer]:
    """The timer triggers of a tenant's pipelines (bad specs are logged and skipped)."""
    drivers = layout.tenant.drivers
    found = []
    for name, pipeline in sorted(layout.layout.pipelines.items()):
        for connection, filters in pipeline.trigger.items():
            if drivers.get(connection) != "timer":
                continue
            for spec in filters:
                try:
                    found.append(Timer(layout.tenant.name, name, CronSpec.parse(str(spec["time"]))))
                except (CronError, KeyError) as exc:
                    log.error("%s/%s: timer %r ignored: %s", layout.tenant.name, name, spec, exc)
    return found


def periodic_changes(layout: TenantLayout, pipeline: str) -> list[Change]:
    """Every project-branch that runs jobs in ``pipeline``: their branch heads."""
    changes = []
    for entry in layout.tenant.projects:
        for branch in layout.layout.branches.get(entry.name, ()):
            if layout.layout.project_pipelines(entry.name, branch, pipeline):
                changes.append(
                    Change(entry.connection, entry.name, branch, branch, is_branch_update=True)
                )
    return changes


Nudge = Callable[[str, str], None]


def fire_due(
    held: HeldLock,
    layouts: Iterable[TenantLayout],
    nudge: Nudge,
    now: float | None = None,
) -> list[str]:
    """Fire every timer that came due since it last fired; the keys fired."""
    now = time.time() if now is None else now
    client = held.context.client
    layouts = list(layouts)
    timers = [(layout, timer) for layout in layouts for timer in timers_of(layout)]
    if not timers:
        return []  # no periodic pipeline anywhere: nothing to read or write
    try:
        found = stored.load(held.context, paths.timer_state())
        last: dict[str, float] = {k: float(v) for k, v in found.data.get("last", {}).items()}
        version = found.version
    except NoDataError:
        last, version = {}, -1
    txn = held.context.transaction()
    fired: list[tuple[str, str, str]] = []
    seen: dict[str, float] = {}
    for layout, timer in timers:
        key = timer.key
        previous = last.get(key)
        if previous is None:  # a new trigger starts counting now
            seen[key] = now
            continue
        due = timer.spec.latest(previous, now, jitter_of(key, timer.spec.jitter))
        seen[key] = previous
        if due is None:
            continue
        seen[key] = due
        queue = EventQueue(client, paths.pipeline_trigger_queue(timer.tenant, timer.pipeline))
        queue.ensure()
        for change in periodic_changes(layout, timer.pipeline):
            event = Enqueue(change, event_id=f"timer:{key}@{int(due)}")
            queue.put_ops(event.to_dict(), txn)
        fired.append((key, timer.tenant, timer.pipeline))
    if seen != last:
        stored.save(held.context, paths.timer_state(), {"last": seen}, version=version, extra=txn)
    for key, tenant, pipeline in fired:
        log.info("timer %s fired", key)
        nudge(tenant, pipeline)
    return [key for key, _, _ in fired]


def describe(state: Mapping[str, Any]) -> dict[str, str]:
    """``/timer/state`` for people: each trigger and when it last fired (UTC)."""
    return {
        key: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(float(value)))
        for key, value in dict(state.get("last", {})).items()
    }
