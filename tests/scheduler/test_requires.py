"""Zuul's provides/requires between changes, driven through the managers directly.

A job that ``requires`` a name waits for the jobs that ``provide`` it in the
items ahead of its item (a gate's chain) and in the live items of its
Depends-On changes (any pipeline), fails with Zuul's message when one of them
failed, and receives their artifacts (and its parents') in ``zuul.artifacts``.
"""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.config.model import BatchConfig, Dependency
from scheduler.manager import events as ev
from scheduler.manager import requirements, settling
from scheduler.manager.settings import PipelineSettings
from scheduler.model import artifacts
from scheduler.model.build import JobInfo
from scheduler.model.change import Change
from scheduler.model.item import QueueItem
from scheduler.model.results import Result
from scheduler.processing.reporters import HistoryReporter
from scheduler.reporting import Artifact, ItemReport
from scheduler.stores import provided
from scheduler.stores.provided import ProvidedBuild, ProvidedRecord
from scheduler.wire.build_spec import BuildContext, BuildSpecError
from scheduler.wire.events import Enqueue
from scheduler.zk import paths
from scheduler.zk.event_queue import EventQueue
from tests.scheduler.gate_harness import Gate
from tests.scheduler.test_manager_batches import merge_event as batch_merge
from tests.scheduler.test_manager_independent import Harness
from tests.scheduler.world import PIPELINE, TENANT, Managers, World

ARTIFACT = {"name": "image", "url": "https://r.example/app:1"}
IMAGE: dict[str, object] = {"zuul": {"artifacts": [ARTIFACT]}}

JOBS = (
    JobInfo("build-image", provides=("image",)),
    JobInfo("use-image", requires=("image",)),
)


def started(builds: list[Any], ref_item: QueueItem) -> dict[str, tuple[dict[str, Any], ...]]:
    """The jobs started for ``ref_item``, with the artifacts each was given."""
    return {b.job.name: b.artifacts for b in builds if b.item == ref_item.uuid}


def gate_of_two() -> tuple[Gate, QueueItem, QueueItem]:
    gate = Gate(JOBS)
    a, b = gate.enqueue("a", "b")
    gate.merge_all()
    return gate, a, b


# -- a gate: the items ahead -----------------------------------------------------


def test_the_requirer_behind_waits_for_the_provider_ahead_and_gets_its_artifact() -> None:
    gate, a, b = gate_of_two()
    # a has nothing ahead: both its jobs start; b's requirer waits for a's provider
    assert started(gate.builds, a) == {"build-image": (), "use-image": ()}
    assert started(gate.builds, b) == {"build-image": ()}
    assert requirements.waiting(gate.item("b")) and not settling.at_rest(gate.item("b"))
    gate.builds.clear()
    gate.run(gate.build_event(gate.item("a"), "build-image", Result.SUCCESS, IMAGE))
    (given,) = started(gate.builds, b)["use-image"]
    assert given == {
        "name": "image",
        "url": "https://r.example/app:1",
        "project": "app",
        "branch": "main",
        "job": "build-image",
    }
    assert not requirements.waiting(gate.item("b"))


def test_a_paused_provider_gives_its_artifacts_at_once() -> None:
    gate, _a, b = gate_of_two()
    gate.builds.clear()
    item = gate.item("a")
    assert item.buildset.jobs is not None
    build = item.buildset.jobs["build-image"].current
    assert build is not None
    data = {"zuul": {"artifacts": [ARTIFACT], "pause": True}}
    gate.run(ev.BuildPaused(build.uuid, item.uuid, item.buildset.uuid, "build-image", data))
    assert [a["name"] for a in started(gate.builds, b)["use-image"]] == ["image"]


def test_a_failed_provider_ahead_fails_the_requirer_with_zuuls_message() -> None:
    jobs = (
        JobInfo("build-image", provides=("image",), voting=False),
        JobInfo("use-image", requires=("image",)),
    )
    gate = Gate(jobs)
    _a, b = gate.enqueue("a", "b")
    gate.merge_all()
    item = gate.item("a")
    assert item.buildset.jobs is not None
    provider = item.buildset.jobs["build-image"].current
    assert provider is not None
    gate.builds.clear()
    gate.run(gate.build_event(item, "build-image", Result.FAILURE))
    assert "use-image" not in started(gate.builds, b)  # it never runs
    use = gate.item("b").buildset.jobs["use-image"]  # type: ignore[index]
    assert use.result is Result.FAILURE
    assert use.current is not None and use.current.message == (
        f"Job use-image requires artifact(s) image provided by build {provider.uuid} "
        '(triggered by change a on project app), but that build failed with result "FAILURE"'
    )


def test_a_provider_whose_item_merged_is_not_waited_for() -> None:
    gate = Gate(JOBS)
    gate.enqueue("a")
    gate.merge_all()
    gate.run(gate.build_event(gate.item("a"), "build-image", Result.SUCCESS, IMAGE))
    gate.run(gate.build_event(gate.item("a"), "use-image", Result.SUCCESS))
    assert gate.reported == [("a", Result.SUCCESS)]  # a left the queue: it merged
    # b enqueued after a merged: nothing ahead provides, its requirer starts at once
    (b,) = gate.enqueue("b")
    gate.merge_all()
    assert started(gate.builds, b) == {"build-image": (), "use-image": ()}


def test_a_job_without_requires_never_waits() -> None:
    gate = Gate((JobInfo("build-image", provides=("image",)), JobInfo("unit")))
    _a, b = gate.enqueue("a", "b")
    gate.merge_all()
    assert started(gate.builds, b) == {"build-image": (), "unit": ()}
    assert not requirements.waiting(b)


def test_only_matching_names_are_waited_for() -> None:
    jobs = (
        JobInfo("build-image", provides=("image",)),
        JobInfo("use-docs", requires=("docs",)),
    )
    gate = Gate(jobs)
    _a, b = gate.enqueue("a", "b")
    gate.merge_all()
    assert started(gate.builds, b) == {"build-image": (), "use-docs": ()}


# -- Depends-On, in an independent pipeline -------------------------------------


def change(ref: str, commit: str = "c1", needs: tuple[Change, ...] = ()) -> Change:
    return Change("local", "app", "main", ref, commit, needs=needs)


def check_with(*changes: Change) -> tuple[Harness, list[QueueItem]]:
    h = Harness(list(JOBS))
    items = []
    for c in changes:
        h.run(Enqueue(c))
        items.append(next(i for i in h.state.items.values() if i.change.ref == c.ref))
    h.take_intents()
    for item in items:
        h.run(h.merge_ok(item))
    return h, items


def test_a_depends_on_change_in_the_pipeline_is_waited_for() -> None:
    h, (a, b) = check_with(change("a"), change("b", needs=(change("a"),)))
    first = h.take_intents().builds
    assert {x.job.name for x in first if x.item == b.uuid} == {"build-image"}
    h.run(h.complete(a, "build-image", Result.SUCCESS, IMAGE))
    builds = h.take_intents().builds
    (use,) = [x for x in builds if x.item == b.uuid]
    assert use.job.name == "use-image" and [x["name"] for x in use.artifacts] == ["image"]


def test_a_failed_provider_of_a_depends_on_change_fails_the_requirer() -> None:
    h, (a, b) = check_with(change("a"), change("b", needs=(change("a"),)))
    h.take_intents()
    h.run(h.complete(a, "build-image", Result.FAILURE))
    assert [x for x in h.take_intents().builds if x.item == b.uuid] == []
    assert b.buildset.jobs is not None
    use = b.buildset.jobs["use-image"]
    assert use.result is Result.FAILURE and use.current is not None
    assert "requires artifact(s) image provided by build" in use.current.message
    assert 'but that build failed with result "FAILURE"' in use.current.message
    h.run(h.complete(b, "build-image", Result.SUCCESS))
    assert b.result is Result.FAILURE and b.message == "failed: use-image"


def test_a_depends_on_change_not_in_the_pipeline_provides_nothing() -> None:
    """Merged, or never enqueued here: the requirer runs without its artifacts."""
    h, (_b,) = check_with(change("b", needs=(change("gone"),)))
    builds = h.take_intents().builds
    assert {x.job.name: x.artifacts for x in builds} == {"build-image": (), "use-image": ()}


def test_another_patchset_of_the_depends_on_change_is_not_waited_for() -> None:
    h, (_a, b) = check_with(change("a", "c2"), change("b", needs=(change("a", "c1"),)))
    builds = h.take_intents().builds
    assert {x.job.name for x in builds if x.item == b.uuid} == {"build-image", "use-image"}


class Recorded:
    """What changes no longer in the pipeline left, by ref (scheduler.stores.provided)."""

    def __init__(self, **records: ProvidedRecord) -> None:
        self.records = records

    def get(self, change: Change) -> ProvidedRecord | None:
        return self.records.get(change.ref)


def recorded(result: str) -> ProvidedRecord:
    artifact = {"name": "image", "url": "u", "project": "app", "job": "build-image"}
    build = ProvidedBuild("build-image", "b-old", result, ("image",), (artifact,))
    return ProvidedRecord(change("a"), "bs-old", 1000.0, (build,))


def check_recorded(record: ProvidedRecord) -> tuple[Harness, QueueItem]:
    h = Harness(list(JOBS))
    h.manager.records = Recorded(a=record)
    h.run(Enqueue(change("b", needs=(change("a"),))))
    (b,) = h.state.items.values()
    h.run(h.merge_ok(b))
    return h, b


def test_a_depends_on_change_that_left_gives_what_its_last_buildset_recorded() -> None:
    h, _b = check_recorded(recorded("SUCCESS"))
    builds = {x.job.name: x.artifacts for x in h.take_intents().builds}
    assert builds["use-image"] == (
        {"name": "image", "url": "u", "project": "app", "job": "build-image"},
    )


def test_a_recorded_failed_provider_fails_the_requirer_with_zuuls_message() -> None:
    h, b = check_recorded(recorded("FAILURE"))
    assert [x.job.name for x in h.take_intents().builds] == ["build-image"]
    assert b.buildset.jobs is not None
    use = b.buildset.jobs["use-image"]
    assert use.result is Result.FAILURE and use.current is not None
    assert use.current.message == (
        "Job use-image requires artifact(s) image provided by build b-old (triggered by "
        'change a on project app), but that build failed with result "FAILURE"'
    )


# -- the parents' artifacts (one buildset) --------------------------------------


def test_parents_artifacts_pass_to_dependents_with_the_log_url_joined() -> None:
    h = Harness(
        [
            JobInfo("build"),
            JobInfo("test", dependencies=(Dependency("build"),)),
            JobInfo("deploy", dependencies=(Dependency("test"),)),
        ]
    )
    h.run(Enqueue(change("a")))
    (item,) = h.state.items.values()
    h.run(h.merge_ok(item))
    h.take_intents()
    data: dict[str, object] = {
        "zuul": {
            "log_url": "https://logs.example/1",
            "artifacts": [{"name": "docs", "url": "docs/", "metadata": {"type": "docs"}}],
        }
    }
    h.run(h.complete(item, "build", Result.SUCCESS, data))
    (test,) = h.take_intents().builds
    docs = {
        "name": "docs",
        "url": "https://logs.example/1/docs/",
        "metadata": {"type": "docs"},
        "project": "app",
        "branch": "main",
        "job": "build",
    }
    assert test.artifacts == (docs,)
    h.run(h.complete(item, "test", Result.SUCCESS))
    (deploy,) = h.take_intents().builds
    assert deploy.artifacts == (docs,)  # a grandparent's too (Zuul's recursive parents)
    assert deploy.parent_data == {}  # parent data stays its direct parents'


# -- what a build returns --------------------------------------------------------


@pytest.mark.parametrize(
    "data",
    [
        {"zuul": "artifacts"},
        {"zuul": {"artifacts": "image"}},
        {"zuul": {"artifacts": [{"name": "image"}]}},
        {"zuul": {"artifacts": [{"name": 3, "url": "u"}]}},
        {"zuul": {"artifacts": [{"name": "i", "url": "u", "metadata": "x"}]}},
        {"zuul": {"artifacts": [{"name": "i", "url": "u"}, "junk"]}},
        {"zuul": {"artifacts": [{"name": "i", "url": "u"}], "log_url": 5}},
    ],
)
def test_result_data_that_breaks_zuuls_artifact_schema_returns_none(data: dict[str, Any]) -> None:
    assert artifacts.returned(data) == []


def test_gerrit_and_github_refs_give_the_change_and_patchset() -> None:
    gerrit = Change("gerrit", "app", "main", "refs/changes/34/1234/5")
    github = Change("github", "app", "main", "refs/pull/7/head")
    (found,) = artifacts.received(IMAGE, gerrit, "j")
    assert (found["change"], found["patchset"]) == ("1234", "5")
    assert artifacts.received(IMAGE, github, "j")[0]["change"] == "7"


def test_the_build_context_carries_artifacts_and_refuses_malformed_ones() -> None:
    base = {"tenant": "t", "build_uuid": "b1", "repo_state": {}, "sources": {}}
    given = [{"name": "image", "url": "u", "project": "app", "job": "j"}]
    context = BuildContext.from_dict({**base, "artifacts": given})
    assert list(context.artifacts) == given
    assert BuildContext.from_dict(context.to_dict()) == context
    for bad in ("image", [{"name": "image"}], [["name", "url"]], [{"name": None, "url": "u"}]):
        with pytest.raises(BuildSpecError, match="artifacts"):
            BuildContext.from_dict({**base, "artifacts": bad})


# -- on ZooKeeper: the record a reported item leaves, read by a later pass ------


def finish(world: World, results: dict[str, str], data: dict[str, object]) -> None:
    """Play the executor: end every pending build with its job's result in ``results``."""
    for request in world.executor.pending():
        claimed = world.executor.claim(request.uuid, "test-worker")
        assert claimed is not None
        outcome = {"result": results[request.job_name], "data": data}
        assert world.executor.complete(claimed, outcome)


def enqueue_change(world: World, ref: str, needs: list[dict[str, str]] | None = None) -> None:
    change = {"connection": "local", "project": "app", "branch": "main", "ref": ref}
    change["commit"] = "c1"
    EventQueue(world.client, paths.pipeline_management_queue(TENANT, PIPELINE)).put(
        {"type": "enqueue", "change": {**change, "needs": needs or []}}
    )


def test_a_reported_providers_record_fails_a_later_depends_on_requirer(world: World) -> None:
    world.env.managers = Managers(JOBS)
    enqueue_change(world, "a")
    world.process()
    world.run(world.merger, {"ok": True})
    world.process()
    finish(world, {"build-image": "FAILURE", "use-image": "SUCCESS"}, IMAGE)
    world.process()
    assert [i.change.ref for i in world.reports.items] == ["a"]
    (a,) = world.reports.items
    assert a.buildset.jobs is not None
    failed = a.buildset.jobs["build-image"].current
    assert failed is not None
    record = provided.ProvidedRecords(world.client, TENANT, PIPELINE).get(a.change)
    assert record is not None and [b.result for b in record.builds] == ["FAILURE"]

    a_change = {"connection": "local", "project": "app", "branch": "main", "ref": "a"}
    enqueue_change(world, "b", needs=[{**a_change, "commit": "c1"}])
    world.process()
    world.run(world.merger, {"ok": True})
    world.process()
    # only build-image runs: use-image failed at once, with Zuul's message
    assert [r.job_name for r in world.executor.pending()] == ["build-image"]
    finish(world, {"build-image": "SUCCESS"}, {})
    world.process()
    b = world.reports.items[-1]
    assert b.change.ref == "b" and b.result is Result.FAILURE
    assert b.buildset.jobs is not None
    use = b.buildset.jobs["use-image"].current
    assert use is not None and use.message == (
        f"Job use-image requires artifact(s) image provided by build {failed.uuid} "
        '(triggered by change a on project app), but that build failed with result "FAILURE"'
    )


def test_the_history_records_each_builds_returned_artifacts() -> None:
    """SQL's sluice_artifacts get what the build returned (Zuul's build artifacts)."""
    gate, _a, _b = gate_of_two()
    gate.run(gate.build_event(gate.item("a"), "build-image", Result.SUCCESS, IMAGE))
    reports: list[ItemReport] = []

    class Recording:
        def record_item(self, report: ItemReport) -> tuple[str, ...]:
            reports.append(report)
            return ()

    HistoryReporter(Recording()).report("t", "gate", gate.item("a"))  # type: ignore[arg-type]
    ends = {end.build.job: end.artifacts for _, end in reports[0].builds}
    assert ends == {"build-image": (Artifact("image", "https://r.example/app:1"),), "use-image": ()}


def test_in_batches_the_requirer_waits_for_the_tail_of_the_batch_ahead_only() -> None:
    """Riders build nothing: the tail of a batch builds for its members."""
    config = BatchConfig(size=2, max_wait=60.0, max_bisect_depth=1)
    settings = PipelineSettings("gate", "dependent", batch_for=lambda project, branch: config)
    gate = Gate(JOBS, settings=settings)
    gate.enqueue("a", "b", "c", "d")  # batches [a, b] and [c, d]: b and d build
    merging = [i for i in gate.state.items.values() if i.buildset.merge_request]
    gate.run(*(batch_merge(gate, i) for i in merging))
    tails = {b.job.name for b in gate.builds if b.item == gate.item("b").uuid}
    assert tails == {"build-image", "use-image"}  # nothing ahead of its batch
    assert {b.job.name for b in gate.builds if b.item == gate.item("d").uuid} == {"build-image"}
    gate.builds.clear()
    gate.run(gate.build_event(gate.item("b"), "build-image", Result.SUCCESS, IMAGE))
    (use,) = [b for b in gate.builds if b.item == gate.item("d").uuid]
    assert [(a["name"], a["job"]) for a in use.artifacts] == [("image", "build-image")]


def test_changes_in_a_cycle_do_not_wait_for_each_other() -> None:
    """Each needs the other: a job providing and requiring "image" in both never deadlocks."""
    jobs = (JobInfo("build-image", provides=("image",), requires=("image",)),)
    a = change("a", needs=(change("b"),))
    b = change("b", needs=(change("a"),))
    h = Harness(list(jobs))
    for c in (a, b):
        h.run(Enqueue(c))
    items = list(h.state.items.values())
    h.take_intents()
    h.run(*(h.merge_ok(i) for i in items))
    assert sorted(x.item for x in h.take_intents().builds) == sorted(i.uuid for i in items)


def test_a_voting_provider_failing_ahead_moves_the_item_behind_instead() -> None:
    """The walk moves b off the failing a and resets it: nothing is required of a any more."""
    gate, _a, _b = gate_of_two()
    gate.builds.clear()
    gate.run(gate.build_event(gate.item("a"), "build-image", Result.FAILURE))
    b = gate.item("b")
    assert b.ahead is None and b.buildset.jobs is None  # reset: merged again on the tip
    assert b.result is None  # its requirer was not failed by a's provider
    gate.merge_all()
    assert started(gate.builds, gate.item("b")) == {"build-image": (), "use-image": ()}
