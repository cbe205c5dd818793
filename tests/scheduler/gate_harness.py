"""A pure harness for the gating managers: a pipeline driven like the processing layer.

:class:`Gate` applies events and advances like one processing pass, then
acts on the intents as the processing layer does: it records merge and
build requests and cancels, answers pushes (``merge_pushed`` or
``merge_failed``), runs the "reporters" (recording what was reported, in
order) and calls ``finish_reported``; it repeats passes while reports or
push answers changed something. No services.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Callable, Sequence

from scheduler.manager import events as ev
from scheduler.manager.base import PipelineManager
from scheduler.manager.dependent import DependentManager
from scheduler.manager.intents import BuildIntent, Intents, MergeIntent, NodeIntent
from scheduler.manager.settings import FreezeResult, PipelineSettings
from scheduler.model.build import JobInfo
from scheduler.model.change import Change
from scheduler.model.item import MergeState, PipelineState, QueueItem
from scheduler.model.results import Result
from scheduler.wire.events import Enqueue


class GateLayout:
    """The same jobs for every item; ``fail_fast`` as the project pipeline says."""

    def __init__(self, jobs: Sequence[JobInfo], fail_fast: bool = False) -> None:
        self.jobs = tuple(jobs)
        self.fail_fast = fail_fast

    def freeze(self, item: QueueItem, outcome: ev.MergeOutcome) -> FreezeResult:
        return FreezeResult(self.jobs, fail_fast=self.fail_fast)


class Ledger:
    """An in-memory semaphore ledger; remembers the most holders ever seen at once."""

    def __init__(self, maxima: dict[str, int] | None = None) -> None:
        self.maxima = maxima or {}
        self.holders: dict[str, set[str]] = defaultdict(set)
        self.peak: dict[str, int] = defaultdict(int)

    def try_acquire(self, name: str, holder: str) -> bool:
        held = self.holders[name]
        if holder in held or len(held) < self.maxima.get(name, 1):
            held.add(holder)
            self.peak[name] = max(self.peak[name], len(held))
            return True
        return False

    def release(self, name: str, holder: str) -> None:
        self.holders[name].discard(holder)


def change(ref: str, project: str = "app", branch: str = "main", commit: str = "c1") -> Change:
    return Change("local", project, branch, ref, commit)


PushAnswer = Callable[[QueueItem], str | None]


class Gate:
    def __init__(
        self,
        jobs: Sequence[JobInfo] = (JobInfo("unit"),),
        manager: type[PipelineManager] = DependentManager,
        settings: PipelineSettings | None = None,
        semaphores: dict[str, int] | None = None,
        fail_fast: bool = False,
    ) -> None:
        counter = itertools.count()
        # the managers' clock (tests move it)
        self.now = 1000.0
        self.state = PipelineState(tenant="t", pipeline="gate")
        self.ledger = Ledger(semaphores)
        self.manager = manager(
            settings or PipelineSettings("gate", manager.kind),
            GateLayout(jobs, fail_fast),
            self.ledger,
            clock=lambda: self.now,
            make_uuid=lambda: f"u{next(counter)}",
        )
        self.merges: list[MergeIntent] = []
        self.builds: list[BuildIntent] = []
        self.cancels: list[str] = []
        self.node_requests: list[NodeIntent] = []
        self.node_deletes: list[str] = []
        self.reported: list[tuple[str, Result | None]] = []
        # the message of each reported item, by ref
        self.messages: dict[str, str] = {}
        # each reported item as it was reported, by ref (the last report of the ref)
        self.reported_items: dict[str, QueueItem] = {}
        self.pushed: list[str] = []
        # None: the push lands; a text: it is refused with that message
        self.push_answer: PushAnswer = lambda item: None
        self.hold_pushes = False
        # follow-up passes before a run is declared unsettled (a push of each head is one)
        self.max_passes = 20

    # -- driving ------------------------------------------------------------------

    def run(self, *events: ev.PipelineEvent) -> None:
        """One processing pass over ``events``, then the follow-up passes."""
        for event in events:
            self.manager.apply(self.state, event)
        for _ in range(self.max_passes):
            self.manager.advance(self.state)
            if not self._act(self._take()):
                return
        raise AssertionError("the pipeline does not settle")

    def _take(self) -> Intents:
        intents = self.manager.intents
        self.manager.intents = Intents()
        return intents

    def _act(self, intents: Intents) -> bool:
        self.merges.extend(intents.merges)
        self.builds.extend(intents.builds)
        self.cancels.extend(c.build for c in intents.cancels)
        for asked in intents.node_requests:
            if not asked.build.done:  # as the processing layer: the request's id on the build
                asked.build.node_request = f"nr-{len(self.node_requests)}"
                self.node_requests.append(asked)
        self.node_deletes.extend(intents.node_deletes)
        again = False
        if not self.hold_pushes:
            for item_uuid in intents.merges_to_push:
                self._push(self.state.items[item_uuid])
                again = True
        for item_uuid in intents.reports:
            item = self.state.items[item_uuid]
            self.reported.append((item.change.ref, item.result))
            self.messages[item.change.ref] = item.message
            self.reported_items[item.change.ref] = item.clone()
        if intents.reports:
            self.manager.finish_reported(self.state, intents.reports)
            again = True
        return again

    def _push(self, item: QueueItem) -> None:
        refused = self.push_answer(item)
        if refused is None:
            self.pushed.append(item.change.ref)
            self.manager.merge_pushed(self.state, item.uuid)
        else:
            self.manager.merge_failed(self.state, item.uuid, refused)

    def enqueue(self, *refs: str, project: str = "app") -> list[QueueItem]:
        items = []
        for ref in refs:
            self.run(Enqueue(change(ref, project)))
            items.append(self.item(ref))
        return items

    def item(self, ref: str) -> QueueItem:
        (found,) = [i for i in self.state.items.values() if i.change.ref == ref and not i.dequeued]
        return found

    def merge_all(self) -> None:
        """Answer every outstanding merge request with a clean merge."""
        pending = [
            i
            for i in self.state.items.values()
            if i.buildset.merge_state is MergeState.PENDING and not i.dequeued
        ]
        self.run(*(self.merge_event(i) for i in pending))

    def merge_event(self, item: QueueItem, ok: bool = True) -> ev.MergeCompleted:
        buildset = item.buildset
        assert buildset.merge_request is not None
        outcome = ev.MergeOutcome(ok=ok, repo_state={"app": {"main": "tip"}}, error="conflict")
        return ev.MergeCompleted(item.uuid, buildset.uuid, buildset.merge_request, outcome)

    def stack_merge_event(self, item: QueueItem) -> ev.MergeCompleted:
        """A clean merge of the item's stack: each change moves ``app`` main to ``m-<ref>``."""
        buildset = item.buildset
        assert buildset.merge_request is not None
        (merge,) = [m for m in self.merges if m.request == buildset.merge_request]
        merged = tuple(
            ev.MergedChange("app", "main", f"m-{c.ref}", (f"{c.ref}.txt",)) for c in merge.changes
        )
        outcome = ev.MergeOutcome(
            ok=True,
            repo_state={"app": {"main": merged[-1].commit}},
            base_state={"app": {"main": "tip"}},
            merged=merged,
        )
        return ev.MergeCompleted(item.uuid, buildset.uuid, buildset.merge_request, outcome)

    def finish(self, ref: str, job: str = "unit", result: Result = Result.SUCCESS) -> None:
        self.run(self.build_event(self.item(ref), job, result))

    def build_event(
        self, item: QueueItem, job: str, result: Result, data: dict[str, object] | None = None
    ) -> ev.BuildCompleted:
        assert item.buildset.jobs is not None
        build = item.buildset.jobs[job].current
        assert build is not None
        return ev.BuildCompleted(
            build.uuid, item.uuid, item.buildset.uuid, job, result, result_data=data or {}
        )

    # -- looking ------------------------------------------------------------------

    def merged_on(self, ref: str) -> tuple[str, ...]:
        """The refs the item's latest merge request stacks (its own last)."""
        item = self.item(ref)
        (merge,) = [m for m in self.merges if m.buildset == item.buildset.uuid]
        return tuple(c.ref for c in merge.changes)

    def running(self, ref: str) -> list[str]:
        item = self.item(ref)
        return sorted(job.name for job in item.buildset.graph if job.running and item.buildset.jobs)

    def queue(self, name: str = "app") -> list[str]:
        return [self.state.items[u].change.ref for u in self.state.queues[name].items]
