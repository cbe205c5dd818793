"""Settled items: a walk advances only the items that can decide something.

A manager's walk (``advance``) used to run every item's step on every pass,
and cloned every item to do it: a pass applying one build result cost as
many steps as the pipeline had items. Most of them decide nothing, pass
after pass: they wait for their own builds.

An item is **settled** when its step ran on it as it is stored and decided
nothing: no intent (no merge, build, cancel, report...) and the item came
out equal to what it went in as. The step is a function of the item, its
place in the queue (the item it is tested on, whether it is in the window),
the layout (jobs, nodesets, the window's rules) and of nothing else that
can change without an event, provided the item *waits only for events*
(:func:`at_rest`: no job waiting for a semaphore slot, for nodes or for
what other items provide, no report waiting out a back-off, no merge push
pending). Running it again would decide nothing again, so the walk skips
it while:

* the pass did not take the item (``ItemMap.owns``: no event touched it),
* it was settled under the manager's layout fence (``PipelineState.fence``),
* its place is the same (the managers check that with what they compute).

The mark (:class:`~scheduler.model.item.Settled`) also keeps whether the
item is failing, which the walk of a shared queue needs of every item.

The mark lives in ``PipelineState.settled``; the store keeps it with the
pristine items (:mod:`scheduler.state.items`) and drops it for an item it
writes changed. An item that decided something is not settled: the next
pass that walks it runs its step once more (and settles it then).

With ``SLUICE_VERIFY_QUIET`` set (the tests), every skipped step is run on
a clone, and a step that decides anything raises.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Protocol

from scheduler.manager import requirements
from scheduler.manager.intents import Intents
from scheduler.model.item import MergeState, PipelineState, PushState, QueueItem, Settled
from scheduler.model.results import Result


class Settles(Protocol):
    """What settling needs of its pipeline's manager (``PipelineManager``)."""

    @property
    def intents(self) -> Intents: ...

    def failing(self, item: QueueItem) -> bool: ...


# set in the tests: skipped passes and skipped steps are run, and must decide nothing
VERIFY = "SLUICE_VERIFY_QUIET"

Step = Callable[[QueueItem], None]

# the fence of a manager built without a layout state (the benches' and the
# scheduler tests' harnesses: one fixed layout per process)
FIXED_LAYOUT = ("", -1)


def verifying() -> bool:
    return bool(os.environ.get(VERIFY))


def at_rest(item: QueueItem) -> bool:
    """Whether nothing but an event can give ``item``'s step something to decide."""
    if item.report_failures or item.report_retry_at is not None:
        return False  # its report is retried after a back-off
    if item.push is PushState.PENDING:
        return False  # its push request is looked for on every pass
    if item.batch and not _batch_at_rest(item):
        return False
    if requirements.waiting(item):
        return False  # what it requires is provided by other items' jobs
    return _jobs_at_rest(item)


def _jobs_at_rest(item: QueueItem) -> bool:
    """No job of ``item`` waits for a semaphore slot or for nodes."""
    for job in (item.buildset.jobs or {}).values():
        if job.waiting_for_semaphore is not None:
            return False  # another pipeline may free a slot
        current = job.current
        if current is not None and current.waiting_for_nodes:
            return False
    return True


def _batch_at_rest(item: QueueItem) -> bool:
    if item.buildset.merge_state is MergeState.NEW and item.result is None:
        return False  # its batch may be waiting for more changes, or for time
    # a failed batch waits for what is ahead of it before it is split
    return item.result in (None, Result.SUCCESS)


def mark(state: PipelineState, uuid: str) -> Settled | None:
    """The mark of ``uuid`` if it was settled under the pass's layout and not taken."""
    found = state.settled.get(uuid)
    if found is None or found.fence != state.fence or state.items.owns(uuid):
        return None
    return found


def advance(manager: Settles, state: PipelineState, uuid: str, step: Step) -> QueueItem:
    """Take the item, run its ``step``, and settle it if the step decided nothing."""
    fresh = not state.items.owns(uuid)
    item = state.items[uuid]
    intents = manager.intents.size()
    step(item)
    settles = (
        fresh
        and state.fence is not None
        and manager.intents.size() == intents
        and item == state.items.pristine(uuid)
        and at_rest(item)
    )
    if settles:
        state.settled[uuid] = Settled(state.fence, manager.failing(item))
    else:
        state.settled.pop(uuid, None)
    return item


def verify(manager: Settles, state: PipelineState, seen: QueueItem, step: Step) -> None:
    """Tests (:func:`verifying`): the skipped ``step`` run on a clone of ``seen`` must
    decide nothing."""
    clone = seen.clone()
    intents = manager.intents.size()
    step(clone)
    if manager.intents.size() != intents or clone != seen:
        raise AssertionError(
            f"{state.tenant}/{state.pipeline}: settled item {seen.uuid} decided when advanced"
        )
