"""Jobs with a nodeset: node requests before build requests (issue 19, part 1).

The manager's rules driven directly, then the pipeline pass against a real
ZooKeeper with the launcher's side played by hand (``NodeStore``).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from scheduler.manager import events as ev
from scheduler.manager.base import PipelineManager
from scheduler.manager.independent import IndependentManager
from scheduler.manager.intents import Intents
from scheduler.manager.settings import FreezeResult, PipelineSettings
from scheduler.model.build import Build, BuildState, JobInfo, JobState
from scheduler.model.change import Change
from scheduler.model.item import PipelineState, QueueItem
from scheduler.model.nodeset import (
    NodeNames,
    nodeset_alternatives,
    nodeset_groups,
    nodeset_nodes,
)
from scheduler.model.results import Result
from scheduler.nudge import task_names
from scheduler.stores.ledger import TxnLedger
from scheduler.stores.node_records import Node, NodeRequestState
from scheduler.stores.nodes import NodeStore
from scheduler.wire.build_spec import BuildSpec
from scheduler.wire.events import Dequeue, Enqueue
from scheduler.zk import paths
from scheduler.zk.client import ZooKeeperClient
from scheduler.zk.event_queue import EventQueue
from tests.scheduler.world import World

UBUNTU = {
    "nodes": [{"name": "n1", "label": "ubuntu"}, {"name": "n2", "label": "debian"}],
    "groups": [{"name": "web", "nodes": ["n1", "n2"]}, {"name": "db", "nodes": "n2"}],
}
JOBS = (JobInfo("on-nodes", spec={"nodeset": UBUNTU}), JobInfo("plain"))


def _nodes_for(job: JobInfo, choice: int) -> NodeNames:
    return nodeset_nodes(job.spec.get("nodeset"), None, choice)


class Jobs:
    def __init__(self, jobs: Sequence[JobInfo] = JOBS) -> None:
        self.jobs = tuple(jobs)

    def freeze(self, item: QueueItem, outcome: ev.MergeOutcome) -> FreezeResult:
        return FreezeResult(self.jobs)


class NoSemaphores:
    def try_acquire(self, name: str, holder: str) -> bool:
        return True

    def release(self, name: str, holder: str) -> None:
        pass


def _settings(nodes: bool = True) -> PipelineSettings:
    if not nodes:
        return PipelineSettings("check")
    return PipelineSettings(
        "check",
        nodes_for=_nodes_for,
        node_choices=lambda job: len(nodeset_alternatives(job.spec.get("nodeset"))),
        groups_for=lambda job, choice: nodeset_groups(job.spec.get("nodeset"), None, choice),
    )


class Harness:
    def __init__(self, nodes: bool = True) -> None:
        counter = itertools.count()
        self.state = PipelineState(tenant="t", pipeline="check")
        self.manager = IndependentManager(
            _settings(nodes),
            Jobs(),
            NoSemaphores(),
            clock=lambda: 1000.0,
            make_uuid=lambda: f"u{next(counter)}",
        )

    def run(self, *events: ev.PipelineEvent) -> Intents:
        for event in events:
            self.manager.apply(self.state, event)
        self.manager.advance(self.state)
        intents = self.manager.intents
        self.manager.intents = Intents()
        return intents

    def start(self) -> QueueItem:
        self.run(Enqueue(Change("local", "app", "main", "feature", "c1")))
        item = next(iter(self.state.items.values()))
        merged = ev.MergeOutcome(ok=True, repo_state={"app": {"main": "abc"}})
        assert item.buildset.merge_request is not None
        intents = self.run(
            ev.MergeCompleted(item.uuid, item.buildset.uuid, item.buildset.merge_request, merged)
        )
        assert [b.job.name for b in intents.builds] == ["plain"]
        (wanted,) = intents.node_requests
        assert (wanted.job, wanted.nodes) == ("on-nodes", (("n1", "ubuntu"), ("n2", "debian")))
        wanted.build.node_request = "200-0000000001"  # what the pass records
        return item


def _job(item: QueueItem, name: str = "on-nodes") -> JobState:
    assert item.buildset.jobs is not None
    return item.buildset.jobs[name]


def _build(item: QueueItem, name: str = "on-nodes") -> Build:
    build = _job(item, name).current
    assert build is not None
    return build


def test_nodeset_forms() -> None:
    named = {"pair": UBUNTU}
    assert nodeset_nodes("pair", named) == (("n1", "ubuntu"), ("n2", "debian"))
    assert nodeset_nodes({"nodes": {"name": ["a", "b"], "label": "x"}}) == (("a", "x"),)
    assert nodeset_nodes({"nodes": [{"name": "c"}, {"label": "y"}]}) == (("y", "y"),)
    assert nodeset_nodes("unknown", named) == () == nodeset_nodes(None)
    assert nodeset_groups("pair", named) == {"n1": ("web",), "n2": ("web", "db")}
    assert nodeset_groups({"nodes": [], "groups": [{"nodes": ["x"]}, "bad"]}) == {}


def test_without_node_providers_a_nodeset_changes_nothing() -> None:
    h = Harness(nodes=False)
    h.run(Enqueue(Change("local", "app", "main", "feature", "c1")))
    item = next(iter(h.state.items.values()))
    assert item.buildset.merge_request is not None
    merged = ev.MergeOutcome(ok=True, repo_state={"app": {"main": "abc"}})
    intents = h.run(
        ev.MergeCompleted(item.uuid, item.buildset.uuid, item.buildset.merge_request, merged)
    )
    assert sorted(b.job.name for b in intents.builds) == ["on-nodes", "plain"]
    assert intents.node_requests == []


def test_fulfilled_nodes_start_the_build_with_them() -> None:
    h = Harness()
    item = h.start()
    build = _build(item)
    assert build.state is BuildState.REQUESTED and build.waiting_for_nodes
    nodes = (
        {"id": "0000000001", "label": "ubuntu", "host": "h1", "connection": {"host": "h1"}},
        {"id": "0000000002", "label": "debian", "host": "h2", "connection": {"host": "h2"}},
    )
    answered = ev.NodesAnswered("200-0000000001", item.uuid, item.buildset.uuid, "on-nodes", True)
    stale = ev.NodesAnswered("200-0000000009", item.uuid, item.buildset.uuid, "on-nodes", True)
    stale_intents = h.run(stale)
    assert stale_intents.builds == [], "another request's answer is stale"
    # ... and deleted: a pass that cancelled its build may have died before deleting it
    assert stale_intents.node_deletes == ["200-0000000009"]
    (started,) = h.run(ev.NodesAnswered(**{**answered.__dict__, "nodes": nodes})).builds
    assert started.build is build and started.job.name == "on-nodes"
    assert [n["name"] for n in build.nodes] == ["n1", "n2"]
    assert build.nodes[0]["host"] == "h1" and not build.waiting_for_nodes
    assert [n["groups"] for n in build.nodes] == [["web"], ["web", "db"]]
    duplicate = h.run(ev.NodesAnswered(**{**answered.__dict__, "nodes": nodes}))
    assert duplicate.builds == [] and duplicate.node_deletes == [], "the build's own request"
    # the build record keeps them (the pipeline state document)
    again = Build.from_dict(build.to_dict())
    assert again.node_request == "200-0000000001" and again.nodes == build.nodes


def test_a_failed_request_is_a_node_failure_of_the_job() -> None:
    h = Harness()
    item = h.start()
    why = "NODE_FAILURE: no provider serves label(s) debian"
    h.run(ev.NodesAnswered("200-0000000001", item.uuid, item.buildset.uuid, "on-nodes", False, why))
    build = _build(item)
    assert (build.result, build.message) == (Result.NODE_FAILURE, why)
    assert _job(item).result is Result.NODE_FAILURE
    plain = _build(item, "plain")
    intents = h.run(
        ev.BuildCompleted(plain.uuid, item.uuid, item.buildset.uuid, "plain", Result.SUCCESS)
    )
    assert item.result is Result.FAILURE and item.message == "failed: on-nodes"
    assert intents.reports == [item.uuid]


BIG = {"nodes": [{"name": "big", "label": "large"}]}
SMALL = {"nodes": [{"name": "small", "label": "tiny"}], "groups": [{"name": "g", "nodes": "small"}]}
CHOICES = {"alternatives": [BIG, {"nodes": []}, SMALL]}


def test_alternatives_forms() -> None:
    named = {"big": BIG, "either": {"alternatives": ["big", SMALL]}}
    assert nodeset_alternatives("either", named) == [BIG, SMALL]
    assert nodeset_alternatives({"alternatives": ["either", "big"]}, named) == [BIG, SMALL, BIG]
    assert nodeset_alternatives(BIG) == [BIG] and nodeset_alternatives(None) == [{}]
    assert nodeset_nodes("either", named, 1) == (("small", "tiny"),)
    assert nodeset_groups("either", named, 1) == {"small": ("g",)}
    assert nodeset_nodes("either", named, 5) == ()
    looping = {"loop": {"alternatives": ["loop"]}}
    assert nodeset_alternatives("loop", looping) == []  # a loop asks for nothing


def _with_alternatives() -> tuple[Harness, QueueItem]:
    h = Harness()
    h.manager.layouts = Jobs([JobInfo("on-nodes", spec={"nodeset": CHOICES})])
    h.run(Enqueue(Change("local", "app", "main", "feature", "c1")))
    item = next(iter(h.state.items.values()))
    merged = ev.MergeOutcome(ok=True, repo_state={"app": {"main": "abc"}})
    assert item.buildset.merge_request is not None
    (wanted,) = h.run(
        ev.MergeCompleted(item.uuid, item.buildset.uuid, item.buildset.merge_request, merged)
    ).node_requests
    assert wanted.nodes == (("big", "large"),)
    wanted.build.node_request = "200-0000000001"
    return h, item


def test_a_failed_alternative_asks_for_the_next_one() -> None:
    h, item = _with_alternatives()
    failed = ev.NodesAnswered("200-0000000001", item.uuid, item.buildset.uuid, "on-nodes", False)
    intents = h.run(failed)
    (wanted,) = intents.node_requests  # the empty alternative is skipped
    assert wanted.nodes == (("small", "tiny"),) and wanted.build is _build(item)
    assert intents.node_deletes == ["200-0000000001"]
    build = _build(item)
    assert build.node_choice == 2 and build.result is None
    assert Build.from_dict(build.to_dict()).node_choice == 2  # kept in the state
    build.node_request = "200-0000000002"
    node = {"id": "0000000007", "label": "tiny", "host": "h", "connection": {"host": "h"}}
    answered = ev.NodesAnswered(
        "200-0000000002", item.uuid, item.buildset.uuid, "on-nodes", True, nodes=(node,)
    )
    (started,) = h.run(answered).builds
    assert [(n["name"], n["groups"]) for n in started.build.nodes] == [("small", ["g"])]


def test_the_last_alternative_failing_is_a_node_failure() -> None:
    h, item = _with_alternatives()
    h.run(ev.NodesAnswered("200-0000000001", item.uuid, item.buildset.uuid, "on-nodes", False))
    _build(item).node_request = "200-0000000002"
    why = "NODE_FAILURE: no provider serves label(s) tiny"
    last = ev.NodesAnswered("200-0000000002", item.uuid, item.buildset.uuid, "on-nodes", False, why)
    intents = h.run(last)
    assert intents.node_requests == []
    build = _build(item)
    assert build.result is Result.NODE_FAILURE
    assert build.message == f"{why} (the last of 3 alternatives)"


def test_a_dequeued_item_deletes_its_outstanding_node_request() -> None:
    h = Harness()
    item = h.start()
    intents = h.run(Dequeue(Change("local", "app", "main", "feature", "c1")))
    assert intents.node_deletes == ["200-0000000001"]
    plain = _build(item, "plain")
    assert [c.build for c in intents.cancels] == [plain.uuid], "no executor request to cancel"
    assert _build(item).result is Result.ABORTED


# -- the pass, against ZooKeeper ---------------------------------------------------


class NodeManagers:
    def open(
        self, client: ZooKeeperClient, tenant: str, pipeline: str
    ) -> tuple[PipelineManager, TxnLedger]:
        ledger = TxnLedger(client, tenant)
        settings = PipelineSettings(pipeline, nodes_for=_nodes_for, node_priority=100)
        return IndependentManager(settings, Jobs((JOBS[0],)), ledger), ledger


def _item_with_request(world: World) -> tuple[NodeStore, str]:
    world.env.managers = NodeManagers()
    world.enqueue("feature")
    world.process()
    world.run(world.merger, {"ok": True})
    world.process()
    store = NodeStore(world.client)
    (request_id,) = store.request_ids()
    assert world.nudges[-1] == (task_names.LAUNCH, (request_id,), "launcher")
    assert world.executor.pending() == [], "no build request before the nodes"
    request = store.request(request_id)
    assert request is not None and request.priority == 100
    assert request.labels == ("ubuntu", "debian") and request.notify is not None
    (item,) = world.state().items.values()
    build = item.buildset.jobs["on-nodes"].current
    assert build.node_request == request_id, "recorded in the same commit"
    return store, request_id


def test_the_pass_submits_the_request_and_the_build_once_fulfilled(world: World) -> None:
    store, request_id = _item_with_request(world)
    held = store.lock_request(request_id, "launcher")
    request = store.request(request_id)
    assert held is not None and request is not None
    drafts = [
        Node("", "static", label, host="h1", connection={"host": "h1"}) for label in request.labels
    ]
    with held:
        request, nodes = store.allocate(held, request, drafts, "launcher")
        store.fulfil(held, request, nodes)
    world.process()
    (pending,) = world.executor.pending()
    (item,) = world.state().items.values()
    build = item.buildset.jobs["on-nodes"].current
    assert pending.uuid == build.uuid
    assert [(n["name"], n["label"], n["id"]) for n in build.nodes] == [
        ("n1", "ubuntu", nodes[0].id),
        ("n2", "debian", nodes[1].id),
    ]
    # the executor's side: accept (the request goes), run, return
    taken = store.accept(request_id, "executor")
    store.return_nodes(taken)
    world.run(world.executor, {"result": "SUCCESS", "data": {}})
    world.process()
    assert [i.result for i in world.reports.items] == [Result.SUCCESS]


def test_the_pass_fails_the_job_and_deletes_a_failed_request(world: World) -> None:
    store, request_id = _item_with_request(world)
    held = store.lock_request(request_id, "launcher")
    request = store.request(request_id)
    assert held is not None and request is not None
    with held:
        store.fail(held, request, "NODE_FAILURE: no provider serves label(s) debian")
    world.process()
    assert store.request_ids() == []
    (item,) = world.reports.items
    assert item.result is Result.FAILURE
    build = item.buildset.jobs["on-nodes"].current
    assert build.result is Result.NODE_FAILURE and "debian" in build.message
    assert world.executor.pending() == []


def test_a_dequeue_deletes_the_waiting_request(world: World) -> None:
    store, request_id = _item_with_request(world)
    state = NodeRequestState.REQUESTED
    assert store.request(request_id).state == state  # type: ignore[union-attr]
    change = {"connection": "local", "project": "app", "branch": "main", "ref": "feature"}
    EventQueue(world.client, paths.pipeline_management_queue("t", "check")).put(
        {"type": "dequeue", "change": change}
    )
    world.process()
    assert store.request_ids() == []
    assert world.state().items == {}


def test_a_build_spec_carries_its_nodes() -> None:
    job = {"name": "on-nodes", "project": "app", "branch": "main", "pipeline": "check"}
    base = {
        "tenant": "t",
        "build_uuid": "b1",
        "repo_state": {"app": {"main": "a" * 40}},
        "sources": {"app": "/srv/git/app"},
    }
    plain = BuildSpec.from_dict({"schema": 3, "job": job, "context": base})
    assert "nodes" not in plain.context.to_dict() and "node_request" not in plain.context.to_dict()
    node = {"name": "n1", "id": "0000000001", "label": "ubuntu", "host": "h1", "connection": {}}
    context = {**base, "node_request": "200-0000000001", "nodes": [node]}
    spec = BuildSpec.from_dict({"schema": 3, "job": job, "context": context})
    assert BuildSpec.from_dict(spec.to_dict()) == spec
    assert spec.context.node_request == "200-0000000001" and spec.context.nodes == (node,)
