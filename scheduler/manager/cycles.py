"""Dependency cycles: changes that need each other are one unit (Zuul's circular dependencies).

A change whose ``Depends-On`` chain comes back to it is in a cycle (the
driver marks the cycle's changes, ``Change.cycle``; the change needs
itself). Where the queue of every change of the cycle sets
``allow-circular-dependencies: true``:

* **Enqueued as one unit.** The dependencies outside the cycle are enqueued
  ahead as usual, then the cycle's changes, consecutively, the change that
  was enqueued last. They share ``QueueItem.cycle`` and ``QueueItem.batch``
  (both the cycle's id): the last one (the *tail*) merges and builds for
  all, as a batch's tail does (:mod:`scheduler.manager.batches`), with the
  jobs of every change's project and branch. Each other member gets the
  whole cycle's merge as its state: every item's buildset holds every
  change of the cycle. A cycle is never split.
* **Failure dequeues all.** When the tail fails (a job, a merge conflict,
  a config error) and everything it was tested on passed, every member is
  dequeued and reported with a reason naming the cycle. A dequeue of one
  member (a new patchset, an operator) dequeues the others too.
* **Success is reported together.** When the tail passes, every member
  passes; the cycle is reported when its first member is at the head, all
  members in the same pass. Where the pipeline merges, the members are
  pushed one after the other, in queue order, and reported once the last
  one landed. A push refused half-way (the forge refuses the second change)
  fails the cycle: every member is reported with the refusal, saying which
  changes were merged and which were not; the rest are not pushed.

In a queue that does not allow it, the change is refused with Zuul's
message (:func:`refusal`). Independent pipelines (check) test a cycle the
same way, in one queue of its own, and report every change.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Protocol

from scheduler.manager import batches
from scheduler.manager.intents import Intents
from scheduler.manager.settings import PipelineSettings
from scheduler.model import reasons
from scheduler.model.change import Change
from scheduler.model.item import PipelineState, PushState, QueueItem
from scheduler.model.reasons import LeaveReason
from scheduler.model.results import Result

log = logging.getLogger(__name__)

# reasons a change leaves without failing: its cycle leaves with the same reason
_TAKEN_OUT = frozenset(
    {reasons.OPERATOR, reasons.SUPERSEDED, reasons.PIPELINE_REMOVED, reasons.NO_JOBS}
)


class Cycling(Protocol):
    """What cycles need of their pipeline's manager (``PipelineManager``)."""

    @property
    def settings(self) -> PipelineSettings: ...

    @property
    def intents(self) -> Intents: ...

    def enqueue_one(self, state: PipelineState, change: Change, event_id: str) -> QueueItem: ...

    def dequeue(
        self, state: PipelineState, item: QueueItem, why: str, report: bool, kind: str = ...
    ) -> None: ...

    def finish(self, item: QueueItem) -> None: ...


def changes_of(change: Change) -> tuple[Change, ...]:
    """The changes of ``change``'s cycle in the order they are enqueued, ``change`` last.

    A dependency list without marks (hand-made events) counts every
    dependency in the cycle.
    """
    others = [n for n in change.needs if n.key != change.key]
    marked = [n for n in others if n.cycle]
    return (*(marked if any(n.cycle for n in change.needs) else others), change)


def refusal(settings: PipelineSettings, change: Change) -> str:
    """Zuul's message when a project of the cycle does not allow it ("" when all do)."""
    for member in changes_of(change):
        if not settings.allows_cycles(member.project, member.branch):
            return (
                f"Dependency cycle detected and project {member.project} "
                "doesn't allow circular dependencies"
            )
    return ""


def label(group: list[QueueItem] | tuple[Change, ...]) -> str:
    """The cycle as people read it: ``dependency cycle (app 1, lib 2)``."""
    changes = [m.change if isinstance(m, QueueItem) else m for m in group]
    return "dependency cycle (" + ", ".join(f"{c.project} {c.ref}" for c in changes) + ")"


def members(state: PipelineState, item: QueueItem) -> list[QueueItem]:
    """The live members of ``item``'s cycle in queue order, for reading only."""
    if not item.cycle:
        return [item]
    return [m for m in batches.members(state, item) if m.cycle == item.cycle]


def enqueue(manager: Cycling, state: PipelineState, change: Change, event_id: str) -> QueueItem:
    """Enqueue the changes of ``change``'s cycle as one unit, ``change`` last.

    The same cycle already queued (another member's event) is returned. A
    change of the cycle queued alone, or in a cycle that was different (it
    grew or shrank), leaves without a report and is queued again in this one.
    """
    cycle = changes_of(change)
    wanted = {(c.key, c.commit) for c in cycle}
    for item in state.find(change):
        if item.cycle and {(m.change.key, m.change.commit) for m in members(state, item)} == wanted:
            return item
    why = f"enqueued again with its {label(cycle)}"
    for member in cycle:
        for old in state.find(member):
            if not old.dequeued and (old.cycle or old.change.commit == member.commit):
                manager.dequeue(state, old, why, report=False, kind=reasons.SUPERSEDED)
    items = [
        manager.enqueue_one(state, c if c is change else replace(c, needs=()), event_id)
        for c in cycle
    ]
    name = items[-1].uuid
    _gather(state, items)
    for item in items:
        item.cycle = item.batch = name
    log.info("%s: enqueued the %s as one unit", manager.settings.name, label(cycle))
    return items[-1]


def _gather(state: PipelineState, items: list[QueueItem]) -> None:
    """The members in one queue, consecutive (an independent pipeline gives each its own)."""
    home = state.queues[items[0].queue]
    for item in items[1:]:
        if item.queue == home.name:
            continue
        state.queues.pop(item.queue, None)
        item.queue = home.name
        home.items.append(item.uuid)
    for item in items:
        home.items.remove(item.uuid)
    home.items.extend(item.uuid for item in items)


def dequeue_all(state: PipelineState, item: QueueItem, why: str, kind: str) -> list[QueueItem]:
    """``item`` leaves: so does every other member of its cycle, the reason naming it.

    A member without a reason of its own is given one. Returns the members
    to take out, last first (so none is moved and reset onto another member
    that leaves too).
    """
    group = members(state, item)
    text = f"{label(group)}: {item.change.project} {item.change.ref} left: {why}"
    # taken out (by hand, a new patchset, the pipeline gone): the others are too;
    # failed: the others failed with it
    taken = kind in _TAKEN_OUT
    gone = Result.DEQUEUED if taken else Result.FAILURE
    for seen in group:
        member = state.items[seen.uuid]
        if member.uuid == item.uuid or member.reason is not None:
            continue
        member.result = member.buildset.result = gone
        member.message = member.buildset.message = text
        member.reason = LeaveReason(kind if taken else reasons.DEPENDENCY_FAILED, text)
    return [state.items[m.uuid] for m in reversed(group)]


def tail_step(manager: Cycling, state: PipelineState, tail: QueueItem, ahead_passed: bool) -> None:
    """The tail stepped: its result is the cycle's (a failure dequeues every member)."""
    group = members(state, tail)
    if tail.result is Result.SUCCESS:
        for seen in group:
            passed = state.items[seen.uuid]
            if passed.result is None or (passed is tail and not passed.message):
                passed.result = passed.buildset.result = Result.SUCCESS
                passed.message = passed.buildset.message = f"tested with its {label(group)}"
        return
    if tail.result is None or not ahead_passed or tail.dequeued:
        return
    why = f"{label(group)} failed: {tail.change.project} {tail.change.ref}: {tail.message}"
    log.info("%s: %s", manager.settings.name, why)
    kind = tail.reason.kind if tail.reason else reasons.FAILED
    tail.message = tail.buildset.message = why
    manager.dequeue(state, tail, why, report=True, kind=kind)
    for seen in group:
        manager.finish(state.items[seen.uuid])  # reported together, in this pass


def at_head(manager: Cycling, state: PipelineState, head: QueueItem) -> None:
    """The cycle's first member is at the head: push every member in turn, then report all."""
    group = [state.items[m.uuid] for m in members(state, head)]
    if any(m.result is None for m in group):
        return  # the tail has not passed yet
    refused = next((m for m in group if m.push is PushState.FAILED), None)
    if refused is not None:
        _merge_failed(manager, state, group, refused)
        return
    if manager.settings.merge_on_success and all(m.result is Result.SUCCESS for m in group):
        for member in group:
            if member.push is PushState.PUSHED:
                continue
            member.push = PushState.PENDING  # one at a time: the next once this one landed
            if member.uuid not in manager.intents.merges_to_push:
                manager.intents.merges_to_push.append(member.uuid)
            return
    for member in group:
        manager.finish(member)


def _merge_failed(
    manager: Cycling, state: PipelineState, group: list[QueueItem], refused: QueueItem
) -> None:
    merged = [m for m in group if m.push is PushState.PUSHED]
    left = [m for m in group if m.push is not PushState.PUSHED and m is not refused]
    text = (
        f"{label(group)} failed to merge: {refused.change.project} {refused.change.ref}: "
        f"{refused.message}"
    )
    if merged:
        text += "; merged: " + ", ".join(f"{m.change.project} {m.change.ref}" for m in merged)
    if left:
        text += "; not merged: " + ", ".join(f"{m.change.project} {m.change.ref}" for m in left)
    log.warning("%s: %s", manager.settings.name, text)
    for member in reversed(group):
        member.result = member.buildset.result = Result.FAILURE
        member.message = member.buildset.message = text
        member.reason = LeaveReason(reasons.PUSH_FAILED, text)
        if member.push is PushState.PENDING:
            member.push = PushState.NONE  # never pushed: the rest are not merged
    manager.dequeue(state, group[0], text, report=True, kind=reasons.PUSH_FAILED)
    for member in group:
        manager.finish(member)
