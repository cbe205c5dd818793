"""A pipeline pass against a real ZooKeeper; the test plays merger and executor."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from scheduler.manager.independent import IndependentManager
from scheduler.manager.settings import FreezeResult, PipelineSettings
from scheduler.model.build import JobInfo
from scheduler.model.results import Result
from scheduler.nudge import task_names
from scheduler.processing import pipeline as processing
from scheduler.stores.ledger import TxnLedger
from scheduler.stores.semaphores import SemaphoreNode
from scheduler.zk import flags, locks, paths, stored
from scheduler.zk.event_queue import EventQueue
from tests.scheduler.world import PIPELINE, TENANT, World


def test_an_item_goes_through_merge_builds_and_report(world: World) -> None:
    world.enqueue("feature")
    assert world.process()
    assert [n[0] for n in world.nudges] == [task_names.MERGE]
    assert len(world.run(world.merger, {"ok": True})) == 1

    world.process()
    lint = world.run(world.executor, {"result": "SUCCESS", "data": {"artifact": "x"}})
    assert len(lint) == 1  # unit waits for lint
    assert world.nudges[-1] == (task_names.BUILD, (lint[0], None), None)

    world.process()
    pending = world.executor.pending()
    assert [r.job_name for r in pending] == ["unit"]
    assert world.executor.params(pending[0].uuid)["parent_data"] == {"artifact": "x"}
    world.run(world.executor, {"result": "SUCCESS", "data": {}})

    world.process()
    assert [item.result for item in world.reports.items] == [Result.SUCCESS]
    assert world.state().items == {}
    for queue in processing.event_queues(world.env, TENANT, PIPELINE):
        assert queue.length() == 0
    assert not flags.is_raised(world.client, paths.pipeline_dirty(TENANT, PIPELINE))


def test_a_busy_pipeline_coalesces_the_nudge(world: World) -> None:
    world.enqueue("feature")
    held = locks.try_exclusive(world.client, paths.pipeline_lock(TENANT, PIPELINE))
    assert held is not None
    try:
        assert not world.process()  # another worker has it: flag raised, return
        assert flags.is_raised(world.client, paths.pipeline_dirty(TENANT, PIPELINE))
    finally:
        held.release()
    assert world.process()
    assert len(world.merger.pending()) == 1
    assert not flags.is_raised(world.client, paths.pipeline_dirty(TENANT, PIPELINE))


def test_a_duplicate_result_event_is_applied_once(world: World) -> None:
    world.enqueue("feature")
    world.process()
    world.run(world.merger, {"ok": True})
    world.process()
    (lint,) = world.run(world.executor, {"result": "FAILURE", "data": {}})
    # The same completion announced twice (a redelivered event).
    EventQueue(world.client, paths.pipeline_result_queue(TENANT, PIPELINE)).put(
        {
            "type": "request-completed",
            "queue": paths.executor_queue(),
            "request": lint,
            "buildset": world.state().items[next(iter(world.state().items))].buildset.uuid,
            "job": "lint",
        }
    )
    world.process()
    assert [item.result for item in world.reports.items] == [Result.FAILURE]
    assert world.executor.pending() == []  # unit was skipped, never requested


def test_a_lost_merge_is_merged_again(world: World) -> None:
    world.enqueue("feature")
    world.process()
    (first,) = [r.uuid for r in world.merger.pending()]
    claimed = world.merger.claim(first, "doomed")
    assert claimed is not None
    claimed.lock.release()  # the merger died: its lock is gone, the request RUNNING
    (lost,) = world.merger.lost_requests()
    assert world.merger.recover_lost(lost)
    world.process()
    again = [r.uuid for r in world.merger.pending()]
    assert len(again) == 1 and again != [first]


def test_a_management_enqueue_records_its_item(world: World) -> None:
    change = {"connection": "local", "project": "app", "branch": "main", "ref": "f", "commit": "c1"}
    queue = EventQueue(world.client, paths.pipeline_management_queue(TENANT, PIPELINE))
    queue.put({"type": "enqueue", "change": change, "result_id": "r1"})
    queue.put({"type": "dequeue", "change": change, "result_id": "r2"})
    queue.put({"type": "dequeue", "change": change, "result_id": "r3"})
    world.process()
    item = stored.decode(world.client.get(paths.management_result("r1"))[0])
    assert set(item) == {"schema", "item"}
    dequeued = stored.decode(world.client.get(paths.management_result("r2"))[0])
    assert dequeued["dequeued"] == [item["item"]]
    missing = stored.decode(world.client.get(paths.management_result("r3"))[0])
    assert missing["error"] == "no such item in the pipeline"


class FencedManagers:
    """World's managers, with the layout fence LayoutManagerSource sets."""

    def __init__(self, inner: Any, fence_path: str, bump: Callable[[], None]) -> None:
        self.inner = inner
        self.fence_path = fence_path
        self.bump = bump
        self.opened = 0

    def open(self, client: Any, tenant: str, pipeline: str) -> Any:
        manager, ledger = self.inner.open(client, tenant, pipeline)
        ledger.layout_fence = (self.fence_path, client.exists(self.fence_path).version)
        self.opened += 1
        if self.opened == 1:
            self.bump()  # a reconfiguration commits while the first pass decides
        return manager, ledger


def test_a_pass_decided_with_a_replaced_layout_commits_nothing_and_decides_again(
    world: World,
) -> None:
    """Seed 003's tenant read lock, as a fence: the commit checks the layout state."""
    fence = paths.layout_state(TENANT)
    world.client.ensure_path(fence)
    world.env.managers = FencedManagers(
        world.env.managers, fence, lambda: world.client.set(fence, b"new layout")
    )
    world.enqueue("feature")
    assert world.process()
    managers = world.env.managers
    assert isinstance(managers, FencedManagers)
    assert managers.opened == 2  # the first pass was refused; the second committed
    assert [n[0] for n in world.nudges] == [task_names.MERGE]
    assert len(world.state().items) == 1


class RacedSemaphore:
    """Managers whose jobs take semaphore ``db``; another pipeline takes a slot
    of it while the first pass decides (the node's version moves on)."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.path = paths.semaphore(TENANT, "db")
        self.opened = 0

    def open(self, client: Any, tenant: str, pipeline: str) -> Any:
        ledger = TxnLedger(client, tenant, maxima={"db": 2}, pipeline=pipeline)
        manager = IndependentManager(PipelineSettings(pipeline), SemaphoreLayout(), ledger)
        self.opened += 1
        if self.opened == 1:
            add_ops = ledger.add_ops

            def racing_add_ops(txn: Any) -> None:
                # another pipeline's pass commits first: a holder of its own
                other = {"holders": ["bs-gate/lint"], "waiters": [], "max": 2}
                self.client.set(self.path, stored.encode(other))
                add_ops(txn)

            ledger.add_ops = racing_add_ops  # type: ignore[method-assign]
        return manager, ledger


class SemaphoreLayout:
    def freeze(self, item: Any, outcome: Any) -> FreezeResult:
        return FreezeResult((JobInfo("lint", semaphores=("db",)),))


def test_a_pass_that_lost_a_semaphore_race_decides_again(world: World) -> None:
    """The compare-and-set on the semaphore fails: nothing is committed, the
    task does not fail, and the next pass takes the slot beside the other holder."""
    racing = RacedSemaphore(world.client)
    world.client.ensure_path(paths.parent(racing.path))
    world.client.create(racing.path, stored.encode({"holders": [], "waiters": [], "max": 2}))
    world.env.managers = racing
    world.enqueue("feature")
    world.process()
    world.run(world.merger, {"ok": True})
    racing.opened = 0
    assert world.process()
    assert racing.opened == 2  # refused once, decided again
    (build,) = world.executor.pending()
    holders = SemaphoreNode(world.client, racing.path).holders()
    assert sorted(holders) == sorted(["bs-gate/lint", f"{build.buildset_uuid}/lint"])
