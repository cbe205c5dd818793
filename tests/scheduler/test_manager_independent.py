"""The independent manager's rules, driven directly (no services)."""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Sequence

import pytest

from scheduler.config.model import Dependency
from scheduler.manager import events as ev
from scheduler.manager.independent import IndependentManager
from scheduler.manager.intents import Intents
from scheduler.manager.settings import FreezeResult, PipelineSettings
from scheduler.model.build import BuildState, JobInfo
from scheduler.model.change import Change
from scheduler.model.item import PipelineState, QueueItem
from scheduler.model.results import Result
from scheduler.wire.events import Dequeue, Enqueue, MalformedEventError, decode


class FixedLayout:
    def __init__(self, jobs: Sequence[JobInfo] = (), errors: Sequence[str] = ()) -> None:
        self.jobs = tuple(jobs)
        self.errors = tuple(errors)

    def freeze(self, item: QueueItem, outcome: ev.MergeOutcome) -> FreezeResult:
        return FreezeResult(self.jobs, self.errors)


class Ledger:
    """An in-memory semaphore ledger with fixed maxima."""

    def __init__(self, maxima: dict[str, int] | None = None) -> None:
        self.maxima = maxima or {}
        self.holders: dict[str, set[str]] = defaultdict(set)

    def try_acquire(self, name: str, holder: str) -> bool:
        held = self.holders[name]
        if holder in held or len(held) < self.maxima.get(name, 1):
            held.add(holder)
            return True
        return False

    def release(self, name: str, holder: str) -> None:
        self.holders[name].discard(holder)


class Harness:
    def __init__(
        self,
        jobs: Sequence[JobInfo] = (),
        errors: Sequence[str] = (),
        semaphores: dict[str, int] | None = None,
    ) -> None:
        counter = itertools.count()
        self.state = PipelineState(tenant="t", pipeline="check")
        self.ledger = Ledger(semaphores)
        self.manager = IndependentManager(
            PipelineSettings("check"),
            FixedLayout(jobs, errors),
            self.ledger,
            clock=lambda: 1000.0,
            make_uuid=lambda: f"u{next(counter)}",
        )

    def run(self, *events: ev.PipelineEvent) -> None:
        for event in events:
            self.manager.apply(self.state, event)
        self.manager.advance(self.state)

    def take_intents(self) -> Intents:
        intents = self.manager.intents
        self.manager.intents = Intents()
        return intents

    def merge_ok(self, item: QueueItem) -> ev.MergeCompleted:
        bs = item.buildset
        assert bs.merge_request is not None
        return ev.MergeCompleted(
            item.uuid,
            bs.uuid,
            bs.merge_request,
            ev.MergeOutcome(ok=True, repo_state={"p": {"main": "abc"}}, files=("a.py",)),
        )

    def complete(
        self, item: QueueItem, job: str, result: Result, data: dict[str, object] | None = None
    ) -> ev.BuildCompleted:
        assert item.buildset.jobs is not None
        build = item.buildset.jobs[job].current
        assert build is not None
        return ev.BuildCompleted(
            build.uuid, item.uuid, item.buildset.uuid, job, result, result_data=data or {}
        )

    def report_all(self) -> list[str]:
        reported = self.take_intents().reports
        self.manager.finish_reported(self.state, reported)
        return reported


def change(ref: str = "feature", commit: str = "c1") -> Change:
    return Change("local", "app", "main", ref, commit)


def enqueue(h: Harness, c: Change | None = None) -> QueueItem:
    h.run(Enqueue(c or change()))
    return next(iter(h.state.items.values()))


def test_enqueue_merge_build_report_dequeue() -> None:
    h = Harness([JobInfo("lint"), JobInfo("unit", dependencies=(Dependency("lint"),))])
    item = enqueue(h)
    intents = h.take_intents()
    assert [m.changes for m in intents.merges] == [(change(),)]

    h.run(h.merge_ok(item))
    started = h.take_intents().builds
    assert [b.job.name for b in started] == ["lint"]  # unit waits for lint
    assert item.buildset.repo_state == {"p": {"main": "abc"}}

    h.run(h.complete(item, "lint", Result.SUCCESS, {"artifact": "x"}))
    started = h.take_intents().builds
    assert [b.job.name for b in started] == ["unit"]
    assert started[0].parent_data == {"artifact": "x"}

    h.run(h.complete(item, "unit", Result.SUCCESS))
    assert item.result is Result.SUCCESS
    assert h.report_all() == [item.uuid]
    assert h.state.items == {} and h.state.queues == {}


def test_failed_hard_dependency_skips_dependents() -> None:
    h = Harness([JobInfo("lint"), JobInfo("unit", dependencies=(Dependency("lint"),))])
    item = enqueue(h)
    h.run(h.merge_ok(item))
    h.run(h.complete(item, "lint", Result.FAILURE))
    assert item.buildset.jobs is not None
    assert item.buildset.jobs["unit"].result is Result.SKIPPED
    assert item.result is Result.FAILURE
    assert item.message == "failed: lint"


def test_soft_dependency_on_an_absent_job_does_not_block() -> None:
    h = Harness([JobInfo("unit", dependencies=(Dependency("docs", soft=True),))])
    item = enqueue(h)
    h.take_intents()
    h.run(h.merge_ok(item))
    assert [b.job.name for b in h.take_intents().builds] == ["unit"]


def test_non_voting_failure_does_not_fail_the_item() -> None:
    h = Harness([JobInfo("unit"), JobInfo("experimental", voting=False)])
    item = enqueue(h)
    h.run(h.merge_ok(item))
    h.run(
        h.complete(item, "unit", Result.SUCCESS), h.complete(item, "experimental", Result.FAILURE)
    )
    assert item.result is Result.SUCCESS


def test_retry_until_attempts_then_retry_limit() -> None:
    h = Harness([JobInfo("unit", attempts=2)])
    item = enqueue(h)
    h.run(h.merge_ok(item))
    h.take_intents()
    h.run(h.complete(item, "unit", Result.RETRY))
    again = h.take_intents().builds
    assert [(b.job.name, b.build.attempt) for b in again] == [("unit", 2)]
    h.run(h.complete(item, "unit", Result.LOST))
    assert item.buildset.jobs is not None
    assert item.buildset.jobs["unit"].result is Result.RETRY_LIMIT
    assert item.result is Result.FAILURE


def test_merge_conflict_and_config_error_are_reported_on_the_item() -> None:
    h = Harness([JobInfo("unit")])
    item = enqueue(h)
    bs = item.buildset
    assert bs.merge_request is not None
    h.run(
        ev.MergeCompleted(
            item.uuid,
            bs.uuid,
            bs.merge_request,
            ev.MergeOutcome(ok=False, error="conflict in a.py"),
        )
    )
    assert item.result is Result.MERGE_CONFLICT
    assert item.message == "conflict in a.py"

    h2 = Harness(errors=["zuul.yaml:3: job 'x': unknown key 'rn'"])
    item2 = enqueue(h2)
    h2.run(h2.merge_ok(item2))
    assert item2.result is Result.CONFIG_ERROR
    assert "unknown key" in item2.message


def test_duplicate_enqueue_and_duplicate_results_change_nothing() -> None:
    h = Harness([JobInfo("unit")])
    item = enqueue(h)
    h.run(Enqueue(change()))
    assert len(h.state.items) == 1
    h.run(h.merge_ok(item))
    h.run(h.merge_ok(item))  # a redelivered merge result
    builds = h.take_intents().builds
    assert len(builds) == 1
    done = h.complete(item, "unit", Result.FAILURE)
    h.run(done)
    h.run(ev.BuildCompleted(done.build, item.uuid, item.buildset.uuid, "unit", Result.SUCCESS))
    assert item.result is Result.FAILURE


def test_new_commit_supersedes_the_queued_item() -> None:
    h = Harness([JobInfo("unit")])
    old = enqueue(h)
    h.run(h.merge_ok(old))
    running = h.take_intents().builds[0].build
    h.run(Enqueue(change(commit="c2")))
    intents = h.take_intents()
    assert [c.build for c in intents.cancels] == [running.uuid]
    assert old.dequeued and old.result is Result.DEQUEUED
    assert old.uuid in intents.reports
    new = [i for i in h.state.items.values() if not i.dequeued]
    assert [i.change.commit for i in new] == ["c2"]


def test_dequeue_aborts_builds_and_reports_dequeued() -> None:
    h = Harness([JobInfo("unit")])
    item = enqueue(h)
    h.run(h.merge_ok(item))
    build = h.take_intents().builds[0].build
    h.run(Dequeue(change()))
    intents = h.take_intents()
    assert [c.build for c in intents.cancels] == [build.uuid]
    assert item.result is Result.DEQUEUED
    assert build.state is BuildState.COMPLETED and build.result is Result.ABORTED


def test_semaphore_of_one_serialises_two_items() -> None:
    h = Harness([JobInfo("deploy", semaphores=("prod",))], semaphores={"prod": 1})
    first = enqueue(h, change("a"))
    h.run(Enqueue(change("b")))
    second = next(i for i in h.state.items.values() if i is not first)
    h.run(h.merge_ok(first), h.merge_ok(second))
    started = h.take_intents().builds
    assert [b.item for b in started] == [first.uuid]
    assert second.buildset.jobs is not None
    assert second.buildset.jobs["deploy"].waiting_for_semaphore == "prod"
    h.run(h.complete(first, "deploy", Result.SUCCESS))
    assert [b.item for b in h.take_intents().builds] == [second.uuid]


@pytest.mark.parametrize(
    "payload",
    [
        {"type": "nope"},
        {"type": "enqueue"},
        {"type": "enqueue", "change": {"project": "p"}},
        {"type": "promote", "changes": []},
        # build events come from request events, read by the processing layer
        {"type": "build-completed", "build": "b", "result": "SUCCESS"},
        {"type": "build-started", "build": "b"},
    ],
)
def test_malformed_events_are_named(payload: dict[str, object]) -> None:
    with pytest.raises(MalformedEventError):
        decode(payload)


def test_an_item_without_jobs_leaves_without_a_report() -> None:
    h = Harness([])
    item = enqueue(h)
    h.run(h.merge_ok(item))
    assert h.take_intents().reports == []
    assert h.state.items == {}


def test_noop_succeeds_without_a_build_request() -> None:
    """Zuul's built-in noop: no executor request; its dependents start at once."""
    h = Harness([JobInfo("noop"), JobInfo("unit", dependencies=(Dependency("noop"),))])
    item = enqueue(h)
    h.take_intents()
    h.run(h.merge_ok(item))
    assert [b.job.name for b in h.take_intents().builds] == ["unit"]
    assert item.buildset.jobs is not None
    noop = item.buildset.jobs["noop"]
    assert noop.result is Result.SUCCESS and noop.current is not None
    assert noop.current.state is BuildState.COMPLETED
    h.run(h.complete(item, "unit", Result.SUCCESS))
    assert item.result is Result.SUCCESS


def test_an_item_with_only_noop_succeeds_in_one_pass() -> None:
    h = Harness([JobInfo("noop")])
    item = enqueue(h)
    h.take_intents()
    h.run(h.merge_ok(item))
    intents = h.take_intents()
    assert intents.builds == [] and intents.reports == [item.uuid]
    assert item.result is Result.SUCCESS


def test_a_job_needing_a_project_the_merge_missed_merges_again_with_it() -> None:
    """Zuul's repo-state step: the config project of a speculative base job, say."""
    h = Harness([JobInfo("unit", projects=("p", "config"))])
    item = enqueue(h)
    h.take_intents()
    h.run(h.merge_ok(item))  # reports only p
    intents = h.take_intents()
    assert intents.builds == []
    assert [m.required for m in intents.merges] == [("config",)]
    bs = item.buildset
    assert bs.merge_request is not None
    state = {"p": {"main": "abc"}, "config": {"main": "def"}}
    h.run(ev.MergeCompleted(item.uuid, bs.uuid, bs.merge_request, ev.MergeOutcome(True, state)))
    assert [b.job.name for b in h.take_intents().builds] == ["unit"]
    assert bs.repo_state == state


def paused(h: Harness, item: QueueItem, job: str, data: dict[str, object]) -> ev.BuildPaused:
    assert item.buildset.jobs is not None
    build = item.buildset.jobs[job].current
    assert build is not None
    return ev.BuildPaused(build.uuid, item.uuid, item.buildset.uuid, job, data)


def test_a_paused_job_starts_its_dependents_and_resumes_when_they_finish() -> None:
    """Zuul's TestJobPause: dependents start with the parent's data; it resumes after them."""
    h = Harness(
        [
            JobInfo("compile"),
            JobInfo("test", dependencies=(Dependency("compile"),)),
            JobInfo("deploy", dependencies=(Dependency("test"),)),
        ]
    )
    item = enqueue(h)
    h.take_intents()
    h.run(h.merge_ok(item))
    assert [b.job.name for b in h.take_intents().builds] == ["compile"]

    h.run(paused(h, item, "compile", {"artifact": "a.tgz"}))
    started = h.take_intents()
    assert [(b.job.name, b.parent_data) for b in started.builds] == [
        ("test", {"artifact": "a.tgz"})
    ]
    assert started.resumes == []

    h.run(h.complete(item, "test", Result.SUCCESS))
    intents = h.take_intents()
    assert [b.job.name for b in intents.builds] == ["deploy"]
    assert intents.resumes == []  # deploy depends on compile through test: not yet
    h.run(h.complete(item, "deploy", Result.SUCCESS))
    assert item.buildset.jobs is not None
    compile_build = item.buildset.jobs["compile"].current
    assert compile_build is not None
    assert [r.build for r in h.take_intents().resumes] == [compile_build.uuid]
    h.run()  # asked once only
    assert h.take_intents().resumes == [] and item.result is None

    h.run(h.complete(item, "compile", Result.SUCCESS))
    assert item.result is Result.SUCCESS


def test_a_paused_job_is_cancelled_with_its_item_and_a_failed_dependent_still_resumes() -> None:
    h = Harness([JobInfo("compile"), JobInfo("test", dependencies=(Dependency("compile"),))])
    item = enqueue(h)
    h.take_intents()
    h.run(h.merge_ok(item))
    h.run(paused(h, item, "compile", {}))
    h.take_intents()
    h.run(h.complete(item, "test", Result.FAILURE))
    assert len(h.take_intents().resumes) == 1
    h.run(h.complete(item, "compile", Result.SUCCESS))
    assert item.result is Result.FAILURE and item.message == "failed: test"

    h2 = Harness([JobInfo("compile"), JobInfo("test", dependencies=(Dependency("compile"),))])
    item2 = enqueue(h2)
    h2.run(h2.merge_ok(item2))
    h2.run(paused(h2, item2, "compile", {}))
    h2.take_intents()
    h2.manager.dequeue_change(h2.state, item2.change)
    cancelled = {c.build for c in h2.take_intents().cancels}
    assert item2.buildset.jobs is not None
    assert {j.current.uuid for j in item2.buildset.jobs.values() if j.current} == cancelled
