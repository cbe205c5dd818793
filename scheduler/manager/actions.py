"""Zuul's reporter actions: which one an item's report is, and when a pipeline is disabled.

A finished item is reported with exactly one action, chosen as Zuul's
``_reportItem`` does:

* ``dequeue``: the item left before it ended (superseded, closed, an operator);
* ``no-jobs``: no job of the pipeline ran for it (reported only where the
  pipeline has ``no-jobs`` reporters);
* ``config-error``: its configuration is broken (``failure`` without
  ``config-error`` reporters);
* ``merge-conflict`` (Zuul's older ``merge-failure``): it did not merge
  (``failure`` without ``merge-conflict`` reporters);
* ``success`` or ``failure``.

``disable-after-consecutive-failures: N``: every ``failure``,
``merge-conflict`` and ``config-error`` report adds one to the pipeline's
count of failures in a row, a ``success`` sets it back to 0. The report that
reaches N is still made as usual; from the next one on, the pipeline is
disabled: its final reports go to its ``disabled`` reporters only, and
nothing else (``enqueue``, ``start``, ``dequeue``) is reported; a gate
merges only if a ``disabled`` reporter says ``merge: true``. A success
while disabled resets the count and enables the pipeline again. Both are in
the pipeline document in ZooKeeper (:class:`~scheduler.model.item.PipelineState`),
so they survive a restart and a reconfiguration.

Pure functions: the pass (:mod:`scheduler.processing.pipeline`) asks
:func:`final_action` before it runs the reporters and calls :func:`counted`
once the report has landed, so a report repeated after a crash is counted
once (the count is committed with the item's removal).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import replace

from scheduler.manager.settings import PipelineSettings
from scheduler.model import reasons
from scheduler.model.item import PipelineState, QueueItem
from scheduler.model.results import Result

# the actions that count as a failure in a row (Zuul's "else: failure" and the errors)
FAILING = frozenset({"failure", "merge-conflict", "config-error"})
# the actions replaced by ``disabled`` while the pipeline is disabled
FINAL = frozenset({"success", "failure", "merge-conflict", "config-error", "no-jobs"})


def item_action(item: QueueItem) -> str:
    """The action of ``item``'s report, before the fallbacks."""
    if item.reason is not None and item.reason.kind == reasons.NO_JOBS:
        return "no-jobs"
    if item.dequeued and item.result in (None, Result.DEQUEUED):
        return "dequeue"
    if item.result is Result.SUCCESS:
        return "success"
    if item.result is Result.CONFIG_ERROR:
        return "config-error"
    if item.result is Result.MERGE_CONFLICT:
        return "merge-conflict"
    return "failure"


def final_action(state: PipelineState, item: QueueItem, configured: Collection[str]) -> str:
    """The action ``item`` is reported with: Zuul's fallbacks, then ``disabled``.

    ``configured``: the actions the pipeline has reporters for. ``""``:
    nothing but the history is told (a dequeue while disabled).
    """
    action = item_action(item)
    if action in ("config-error", "merge-conflict") and action not in configured:
        action = "failure"
    if state.disabled:
        return "disabled" if action in FINAL else ""
    return action


def settings_for(settings: PipelineSettings, state: PipelineState) -> PipelineSettings:
    """What a manager decides with: a disabled gate merges only if its ``disabled``
    reporters say ``merge: true`` (its ``success`` reporters are not told)."""
    if not state.disabled or settings.merge_on_success == settings.merge_when_disabled:
        return settings
    return replace(settings, merge_on_success=settings.merge_when_disabled)


def announces(state: PipelineState) -> bool:
    """Whether ``enqueue`` and ``start`` reports are made (not while disabled)."""
    return not state.disabled


def counted(state: PipelineState, item: QueueItem, disable_after: int | None) -> None:
    """``item``'s report landed: count it towards (or out of) the disabled state."""
    if disable_after is None:
        return
    action = item_action(item)
    if action == "success":
        state.consecutive_failures = 0
        state.disabled = False
    elif action in FAILING:
        state.consecutive_failures += 1
        if state.consecutive_failures >= disable_after:
            state.disabled = True
