"""Paused jobs (Zuul's ``zuul.pause``, TestJobPause), driven through the manager directly."""

from __future__ import annotations

from scheduler.config.model import Dependency
from scheduler.manager import events as ev
from scheduler.model.build import BuildState, JobInfo
from scheduler.model.item import QueueItem
from scheduler.model.results import Result
from scheduler.views.status import job_state
from scheduler.wire.events import Dequeue
from tests.scheduler.gate_harness import Gate
from tests.scheduler.test_manager_independent import Harness, enqueue


def paused(item: QueueItem, job: str, data: dict[str, object]) -> ev.BuildPaused:
    assert item.buildset.jobs is not None
    build = item.buildset.jobs[job].current
    assert build is not None
    return ev.BuildPaused(build.uuid, item.uuid, item.buildset.uuid, job, data)


def build_of(item: QueueItem, job: str) -> str:
    assert item.buildset.jobs is not None
    build = item.buildset.jobs[job].current
    assert build is not None
    return build.uuid


def resumed(h: Harness) -> list[str]:
    return [r.build for r in h.take_intents().resumes]


def compile_and_tests(**compile_options: object) -> Harness:
    return Harness(
        [
            JobInfo("compile", **compile_options),  # type: ignore[arg-type]
            JobInfo("test1", dependencies=(Dependency("compile"),)),
            JobInfo("test2", dependencies=(Dependency("compile"),)),
        ],
        semaphores={"sem": 1},
    )


def started_paused(h: Harness) -> QueueItem:
    item = enqueue(h)
    h.run(h.merge_ok(item))
    assert [b.job.name for b in h.take_intents().builds] == ["compile"]
    h.run(paused(item, "compile", {"zuul": {"pause": True}, "artifact": "a.tgz"}))
    return item


def test_dependents_start_when_the_parent_pauses_with_its_data() -> None:
    h = compile_and_tests()
    item = started_paused(h)
    intents = h.take_intents()
    assert sorted(b.job.name for b in intents.builds) == ["test1", "test2"]
    assert all(b.parent_data["artifact"] == "a.tgz" for b in intents.builds)
    assert intents.resumes == []  # its dependents have not finished
    assert item.buildset.jobs is not None
    assert job_state(item.buildset.jobs["compile"]) == "paused"


def test_the_parent_resumes_when_every_dependent_finished_and_then_the_item_completes() -> None:
    h = compile_and_tests()
    item = started_paused(h)
    h.take_intents()
    h.run(h.complete(item, "test1", Result.SUCCESS))
    assert resumed(h) == []
    h.run(h.complete(item, "test2", Result.SUCCESS))
    assert resumed(h) == [build_of(item, "compile")]
    h.run()  # asked once: the flag is committed with the state that records it
    assert resumed(h) == []
    assert item.result is None  # the item waits for the paused job
    h.run(h.complete(item, "compile", Result.SUCCESS))
    assert resumed(h) == [] and item.result is Result.SUCCESS


def test_the_parent_waits_for_dependents_of_dependents() -> None:
    h = Harness(
        [
            JobInfo("compile"),
            JobInfo("test", dependencies=(Dependency("compile"),)),
            JobInfo("deploy", dependencies=(Dependency("test"),)),
        ]
    )
    item = started_paused(h)
    h.take_intents()
    h.run(h.complete(item, "test", Result.SUCCESS))
    intents = h.take_intents()
    assert [b.job.name for b in intents.builds] == ["deploy"]
    assert intents.builds[0].parent_data == {}  # only its own parents' data
    assert intents.resumes == []
    h.run(h.complete(item, "deploy", Result.SUCCESS))
    assert resumed(h) == [build_of(item, "compile")]


def test_a_failing_dependent_still_resumes_the_parent() -> None:
    h = Harness(
        [
            JobInfo("compile"),
            JobInfo("test", dependencies=(Dependency("compile"),)),
            JobInfo("deploy", dependencies=(Dependency("test"),)),
        ]
    )
    item = started_paused(h)
    h.take_intents()
    h.run(h.complete(item, "test", Result.FAILURE))
    assert item.buildset.jobs is not None
    assert item.buildset.jobs["deploy"].result is Result.SKIPPED
    assert resumed(h) == [build_of(item, "compile")]
    h.run(h.complete(item, "compile", Result.SUCCESS))
    assert item.result is Result.FAILURE and item.message == "failed: test"


def test_a_post_failure_after_the_resume_fails_the_item() -> None:
    h = compile_and_tests()
    item = started_paused(h)
    h.run(h.complete(item, "test1", Result.SUCCESS), h.complete(item, "test2", Result.SUCCESS))
    h.run(h.complete(item, "compile", Result.POST_FAILURE))
    assert item.result is Result.FAILURE and item.message == "failed: compile"


def test_a_paused_job_keeps_its_semaphore_and_is_cancelled_with_its_item() -> None:
    h = compile_and_tests(semaphores=("sem",))
    item = started_paused(h)
    h.take_intents()
    assert h.ledger.holders["sem"] == {f"{item.buildset.uuid}/compile"}
    h.run(Dequeue(item.change))
    intents = h.take_intents()
    assert build_of(item, "compile") in {c.build for c in intents.cancels}
    assert intents.resumes == []
    assert item.buildset.jobs is not None
    compile_build = item.buildset.jobs["compile"].current
    assert compile_build is not None
    assert compile_build.state is BuildState.COMPLETED and compile_build.result is Result.ABORTED
    assert h.ledger.holders["sem"] == set()
    assert item.result is Result.DEQUEUED


def test_fail_fast_cancels_a_paused_job() -> None:
    h = compile_and_tests()
    item = enqueue(h)
    h.run(h.merge_ok(item))
    item.buildset.fail_fast = True
    h.run(paused(item, "compile", {"zuul": {"pause": True}}))
    h.take_intents()
    h.run(h.complete(item, "test1", Result.FAILURE))
    intents = h.take_intents()
    cancelled = {c.build for c in intents.cancels}
    assert {build_of(item, "compile"), build_of(item, "test2")} <= cancelled
    assert intents.resumes == []
    assert item.result is Result.FAILURE


def test_a_stale_pause_changes_nothing() -> None:
    h = compile_and_tests()
    item = started_paused(h)
    h.run(h.complete(item, "test1", Result.SUCCESS), h.complete(item, "test2", Result.SUCCESS))
    h.run(h.complete(item, "compile", Result.SUCCESS))
    h.take_intents()
    assert item.result is Result.SUCCESS
    h.run(paused(item, "compile", {"late": True}))
    assert h.take_intents().resumes == []


def test_nested_pauses_resume_innermost_first() -> None:
    """Zuul's test_job_pause: compile2 (paused under compile1) resumes and completes first."""
    h = Harness(
        [
            JobInfo("compile1"),
            JobInfo("compile2", dependencies=(Dependency("compile1"),)),
            JobInfo("test-after-compile2", dependencies=(Dependency("compile2"),)),
            JobInfo("test1-after-compile1", dependencies=(Dependency("compile1"),)),
        ]
    )
    item = enqueue(h)
    h.run(h.merge_ok(item))
    h.take_intents()
    h.run(paused(item, "compile1", {"one": 1}))
    started = {b.job.name: b.parent_data for b in h.take_intents().builds}
    assert started == {"compile2": {"one": 1}, "test1-after-compile1": {"one": 1}}
    h.run(
        paused(item, "compile2", {"two": 2}),
        h.complete(item, "test1-after-compile1", Result.SUCCESS),
    )
    intents = h.take_intents()
    assert [(b.job.name, b.parent_data) for b in intents.builds] == [
        ("test-after-compile2", {"two": 2})
    ]
    assert intents.resumes == []
    h.run(h.complete(item, "test-after-compile2", Result.SUCCESS))
    assert resumed(h) == [build_of(item, "compile2")]  # compile1 waits for compile2
    h.run(h.complete(item, "compile2", Result.SUCCESS))
    assert resumed(h) == [build_of(item, "compile1")]
    h.run(h.complete(item, "compile1", Result.SUCCESS))
    assert item.result is Result.SUCCESS


def skipped_child_harness() -> Harness:
    return Harness(
        [
            JobInfo("compile"),
            JobInfo("pre-test"),
            JobInfo("test", dependencies=(Dependency("compile"), Dependency("pre-test"))),
        ]
    )


def test_a_child_skipped_after_the_pause_resumes_the_parent() -> None:
    h = skipped_child_harness()
    item = started_paused_with(h, ["compile", "pre-test"])
    h.run(h.complete(item, "pre-test", Result.FAILURE))
    assert item.buildset.jobs is not None
    assert item.buildset.jobs["test"].result is Result.SKIPPED
    assert resumed(h) == [build_of(item, "compile")]


def test_a_child_skipped_before_the_pause_resumes_the_parent_at_once() -> None:
    h = skipped_child_harness()
    item = enqueue(h)
    h.run(h.merge_ok(item))
    h.take_intents()
    h.run(h.complete(item, "pre-test", Result.FAILURE))
    h.run(paused(item, "compile", {}))
    assert resumed(h) == [build_of(item, "compile")]
    h.run(h.complete(item, "compile", Result.SUCCESS))
    assert item.result is Result.FAILURE and item.message == "failed: pre-test"


def started_paused_with(h: Harness, first: list[str]) -> QueueItem:
    item = enqueue(h)
    h.run(h.merge_ok(item))
    assert sorted(b.job.name for b in h.take_intents().builds) == sorted(first)
    h.run(paused(item, "compile", {}))
    h.take_intents()
    return item


def test_a_lost_paused_job_is_retried_with_every_job_depending_on_it() -> None:
    """Zuul's test_job_pause_retry: children are aborted and run again after the new parent."""
    h = Harness(
        [
            JobInfo("compile"),
            JobInfo("test1", dependencies=(Dependency("compile"),)),
            JobInfo("test2", dependencies=(Dependency("compile"),), attempts=1),
        ]
    )
    item = started_paused(h)
    h.take_intents()
    old_test1, old_test2 = build_of(item, "test1"), build_of(item, "test2")
    h.run(h.complete(item, "test2", Result.SUCCESS))
    h.run(h.complete(item, "compile", Result.LOST))
    intents = h.take_intents()
    assert [c.build for c in intents.cancels] == [old_test1]  # test2 had finished
    assert [b.job.name for b in intents.builds] == ["compile"]  # alone, attempt 2
    assert intents.builds[0].build.attempt == 2
    assert item.buildset.jobs is not None
    jobs = item.buildset.jobs
    assert jobs["test1"].current is None and jobs["test2"].current is None
    assert [b.result for b in jobs["test1"].builds] == [Result.ABORTED]  # history kept
    h.run(paused(item, "compile", {"again": True}))
    intents = h.take_intents()
    assert sorted(b.job.name for b in intents.builds) == ["test1", "test2"]
    assert all(b.parent_data == {"again": True} for b in intents.builds)
    assert {b.build.attempt for b in intents.builds} == {2}  # numbers go on
    # test2 (attempts: 1) still has its one try: a reset run starts from the first
    h.run(h.complete(item, "test2", Result.LOST))
    assert jobs["test2"].result is Result.RETRY_LIMIT
    h.run(h.complete(item, "test1", Result.SUCCESS))
    assert resumed(h) == [build_of(item, "compile")]
    h.run(h.complete(item, "compile", Result.SUCCESS))
    assert item.result is Result.FAILURE and item.message == "failed: test2"
    assert build_of(item, "test1") != old_test1 and build_of(item, "test2") != old_test2


def test_a_gate_reset_cancels_the_paused_job_and_releases_its_semaphore() -> None:
    g = Gate(
        jobs=(
            JobInfo("compile", semaphores=("sem",)),
            JobInfo("unit", dependencies=(Dependency("compile"),)),
        ),
        semaphores={"sem": 2},
    )
    g.enqueue("A", "B")
    g.merge_all()
    b = g.item("B")
    assert b.buildset.jobs is not None
    paused_build, old = build_of(b, "compile"), b.buildset.uuid
    g.run(paused(b, "compile", {"x": 1}))
    assert g.running("B") == ["compile", "unit"]
    assert f"{old}/compile" in g.ledger.holders["sem"]
    g.run(g.build_event(g.item("A"), "compile", Result.FAILURE))  # A fails: B is reset
    assert paused_build in g.cancels
    assert f"{old}/compile" not in g.ledger.holders["sem"]
    assert g.item("B").buildset.uuid != old  # tested again without A
