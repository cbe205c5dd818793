"""A pass with no event on a state at rest reads nothing of the state (processing/quiet.py)."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.manager.independent import IndependentManager
from scheduler.manager.settings import PipelineSettings
from scheduler.model.build import Build, BuildState, JobInfo, JobState
from scheduler.model.change import Change
from scheduler.model.item import BuildSet, PipelineState, PushState, QueueItem
from scheduler.model.results import Result
from scheduler.processing import pipeline as processing
from scheduler.processing import quiet
from scheduler.stores.ledger import TxnLedger
from scheduler.zk import paths, stored
from scheduler.zk.client import ZooKeeperClient, connect
from scheduler.zk.context import Transaction
from tests.fixtures.services import ZooKeeperTarget
from tests.scheduler.test_processing import SemaphoreLayout
from tests.scheduler.world import PIPELINE, TENANT, World

STATE = paths.pipeline_state(TENANT, PIPELINE)


def running(world: World) -> None:
    """One item whose first job runs: at rest until its result comes."""
    world.enqueue("feature")
    world.process()
    world.run(world.merger, {"ok": True})
    world.process()
    assert len(world.executor.pending()) == 1


def state_reads(world: World) -> list[tuple[str, str]]:
    """The requests a ``process`` sends under the pipeline's state (not its flags)."""
    with world.client.counting_requests() as count:
        world.process()
    found = []
    for kind, path in count.calls:
        _, mark, rest = path.partition(STATE)  # paths sent carry the client's chroot
        if mark and not rest.startswith("/dirty"):
            found.append((kind, STATE + rest))
    return found


def test_a_confirming_pass_costs_the_lock_and_one_look(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(quiet.VERIFY_QUIET, raising=False)  # skipped, not verified
    running(world)
    world.process()  # the confirming pass after the working one: at rest
    with world.client.counting_requests() as count:
        world.process()
    kinds = [kind for kind, _ in count.calls]
    # the lock (create, delete), one look (queues, layout), the state's stat, the flag
    assert sorted(kinds) == ["Create", "Delete", "Exists", "Exists", "MultiReadRequest"]
    assert state_reads(world) == [("Exists", STATE)]  # a stat: no data, whatever the depth
    assert len(world.executor.pending()) == 1  # and nothing was decided twice


def test_an_event_ends_the_rest(world: World) -> None:
    running(world)
    world.process()
    world.run(world.executor, {"result": "SUCCESS", "data": {}})
    world.process()  # lint's result is applied, unit requested
    assert [r.job_name for r in world.executor.pending()] == ["unit"]


def test_a_commit_by_another_worker_ends_the_rest(world: World, zookeeper: ZooKeeperTarget) -> None:
    running(world)
    world.process()
    other = connect(zookeeper.settings())
    try:
        elsewhere = World(other)
        elsewhere.run(elsewhere.executor, {"result": "SUCCESS", "data": {}})
        elsewhere.process()  # applies lint's result: unit requested
    finally:
        other.stop()
        other.close()
    reads = state_reads(world)
    assert ("GetData", STATE) in reads  # the state is read again, not skipped
    (item,) = world.state().items.values()
    assert item.buildset.jobs["lint"].result is Result.SUCCESS


def test_a_pass_that_raises_ends_the_rest(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    running(world)
    world.process()
    world.run(world.executor, {"result": "SUCCESS", "data": {}})

    def fail(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("the worker dies before its commit")

    monkeypatch.setattr(processing.PipelinePass, "commit", fail)
    with pytest.raises(RuntimeError):
        world.process()
    monkeypatch.undo()
    world.process()  # the event is still there: applied, not skipped
    assert [r.job_name for r in world.executor.pending()] == ["unit"]


def test_a_new_layout_ends_the_rest(client: ZooKeeperClient) -> None:
    client.ensure_path(STATE)
    stat = client.exists(STATE)
    mark = quiet.QuietMark(stat.version, stat.mzxid, ("/layout/t", 3))
    quiet.remember(client, TENANT, PIPELINE, mark, PipelineState(TENANT, PIPELINE))
    assert quiet.holds(client, TENANT, PIPELINE, ("/layout/t", 3), client.exists(STATE))
    assert not quiet.holds(client, TENANT, PIPELINE, ("/layout/t", 4), client.exists(STATE))
    client.set(STATE, b"")  # any write to the pipeline document
    assert not quiet.holds(client, TENANT, PIPELINE, ("/layout/t", 3), client.exists(STATE))
    assert not quiet.holds(client, TENANT, PIPELINE, ("/layout/t", 3), None)


def _state(**changes: Any) -> PipelineState:
    build = Build("b1", "unit", 1, BuildState.RUNNING)
    job = JobState(JobInfo("unit"), [build])
    item = QueueItem(
        "i1",
        Change("local", "app", "main", "feature", "c1"),
        "q",
        BuildSet("bs1", jobs={"unit": job}),
        1.0,
    )
    for name, value in changes.items():
        if name in ("waiting_for_semaphore",):
            setattr(job, name, value)
        elif name in ("node_request",):
            setattr(build, name, value)
        else:
            setattr(item, name, value)
    state = PipelineState(TENANT, PIPELINE)
    state.items[item.uuid] = item
    return state


@pytest.mark.parametrize(
    "changes",
    [
        {"waiting_for_semaphore": "db"},
        {"node_request": "200-0000000001"},
        {"report_failures": 1, "report_retry_at": 5.0},
        {"push": PushState.PENDING},
    ],
    ids=["semaphore", "nodes", "report-retry", "push"],
)
def test_a_state_waiting_on_more_than_events_is_never_at_rest(changes: dict[str, Any]) -> None:
    assert quiet.at_rest(_state())
    assert not quiet.at_rest(_state(**changes))


class OneSlot:
    """Managers whose one job takes semaphore ``db`` (one slot)."""

    def open(self, client: Any, tenant: str, pipeline: str) -> Any:
        ledger = TxnLedger(client, tenant, maxima={"db": 1}, pipeline=pipeline)
        return IndependentManager(PipelineSettings(pipeline), SemaphoreLayout(), ledger), ledger


def test_a_job_waiting_for_a_slot_gets_it_from_a_pass_without_events(world: World) -> None:
    """A freed slot wakes the waiter with a nudge and no event: that pass must run."""
    path = paths.semaphore(TENANT, "db")
    world.client.ensure_path(paths.parent(path))
    held = {"holders": ["bs-gate/deploy"], "waiters": [], "max": 1}
    world.client.create(path, stored.encode(held))
    world.env.managers = OneSlot()
    world.enqueue("feature")
    world.process()
    world.run(world.merger, {"ok": True})
    world.process()  # lint waits for the slot
    world.process()  # a confirming pass: nothing yet
    assert world.executor.pending() == []
    other = TxnLedger(world.client, TENANT, {"db": 1}, pipeline="gate")
    other.release("db", "bs-gate/deploy")
    txn = Transaction(world.client)
    other.add_ops(txn)
    txn.commit()
    world.process()  # the nudge of the release: no event in any queue
    assert [r.job_name for r in world.executor.pending()] == ["lint"]
