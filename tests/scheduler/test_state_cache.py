"""The cache of decoded items (scheduler/state/items.py): cheap, and never stale.

An item whose documents did not change is neither decoded nor encoded
again; but a write by another process is always seen, a pass that fails
leaves the cache as ZooKeeper is, and whatever a pass does to its items
never reaches the cached copies.
"""

from __future__ import annotations

import multiprocessing
from typing import Any

import pytest

from scheduler.model.build import Build, BuildState, JobState
from scheduler.model.item import PipelineState, QueueItem
from scheduler.model.results import Result
from scheduler.processing import pipeline as processing
from scheduler.settings.sections import ZooKeeperSettings
from scheduler.state import items
from scheduler.state.store import PipelineStore
from scheduler.zk.client import ZooKeeperClient, connect
from scheduler.zk.context import OpFailedError
from scheduler.zk.errors import LockLostError
from tests.fixtures.services import ZooKeeperTarget
from tests.scheduler.test_state_store import lock, sample_state
from tests.scheduler.world import PIPELINE, TENANT, World


@pytest.fixture
def decodes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The uuids of the items decoded from documents, in order."""
    seen: list[str] = []
    original = QueueItem.from_dict.__func__  # type: ignore[attr-defined]

    def counting(cls: type[QueueItem], data: Any, buildset: Any) -> QueueItem:
        seen.append(str(data["uuid"]))
        return original(cls, data, buildset)  # type: ignore[no-any-return]

    monkeypatch.setattr(QueueItem, "from_dict", classmethod(counting))
    return seen


def written(client: ZooKeeperClient, state: PipelineState) -> PipelineState:
    store = PipelineStore(client)
    with lock(client, state) as held:
        store.write(held.context, store.read(state.tenant, state.pipeline), state)
    return state


def read(client: ZooKeeperClient, state: PipelineState) -> PipelineState:
    store = PipelineStore(client)
    return store.state(state.tenant, state.pipeline, store.read(state.tenant, state.pipeline))


def build_of(state: PipelineState, item: str, job: str) -> Build:
    jobs = state.items[item].buildset.jobs
    assert jobs is not None
    current = jobs[job].current
    assert current is not None
    return current


# ------------------------------------------------------------------ cheap


def test_an_unchanged_item_is_not_decoded_again(
    client: ZooKeeperClient, decodes: list[str]
) -> None:
    state = written(client, sample_state())  # created: the next read reads it all
    read(client, state)
    assert sorted(decodes) == ["i0", "i1"]
    decodes.clear()
    written(client, state)  # a pass that commits: its items are kept as written
    first = read(client, state)
    second = read(client, state)
    assert decodes == []
    assert first.items["i0"] == second.items["i0"] == state.items["i0"]
    assert first.items["i0"] is not second.items["i0"]  # each reader has its own copy


def test_a_cached_read_costs_one_stat(client: ZooKeeperClient) -> None:
    state = written(client, sample_state())
    written(client, state)  # once created, every commit's tree is cached
    store = PipelineStore(client)
    with client.counting_requests() as count:
        store.read(state.tenant, state.pipeline, locked=True)
    assert [kind for kind, _ in count.calls] == ["Exists"]


def test_only_the_touched_item_is_encoded(
    client: ZooKeeperClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = written(client, sample_state())
    mine = read(client, state)
    build_of(mine, "i1", "unit").state = BuildState.COMPLETED
    encoded: list[str] = []
    original = QueueItem.to_dict

    def counting(self: QueueItem) -> dict[str, Any]:
        encoded.append(self.uuid)
        return original(self)

    monkeypatch.setattr(QueueItem, "to_dict", counting)
    written(client, mine)
    assert encoded == ["i1"]


# ------------------------------------------------------------------ never stale


def _write_elsewhere(settings: ZooKeeperSettings, message: str) -> None:
    """Another process: its own cache, its own client; it changes item i0."""
    other = connect(settings)
    try:
        store = PipelineStore(other)
        tree = store.read(TENANT, PIPELINE)
        state = store.state(TENANT, PIPELINE, tree)
        state.items["i0"].message = message
        build_of(state, "i0", "unit").state = BuildState.COMPLETED
        with lock(other, state) as held:
            store.write(held.context, tree, state)
    finally:
        other.stop()
        other.close()


def test_another_process_write_is_seen_by_the_next_read(
    client: ZooKeeperClient, zookeeper: ZooKeeperTarget, decodes: list[str]
) -> None:
    state = sample_state()
    state.tenant, state.pipeline = TENANT, PIPELINE
    written(client, state)
    assert read(client, state).items["i0"].message == ""  # cached here now
    process = multiprocessing.get_context("spawn").Process(
        target=_write_elsewhere, args=(zookeeper.settings(), "written elsewhere")
    )
    process.start()
    process.join(60)
    assert process.exitcode == 0
    again = read(client, state)
    assert again.items["i0"].message == "written elsewhere"
    assert build_of(again, "i0", "unit").state is BuildState.COMPLETED
    assert "i0" in decodes


def test_another_process_write_is_seen_by_the_next_pass(
    world: World, zookeeper: ZooKeeperTarget
) -> None:
    world.enqueue("feature")
    world.process()
    world.run(world.merger, {"ok": True})
    world.process()  # lint requested; this process keeps the item
    (item_uuid,) = world.state().items
    kept = items.snapshot(TENANT, PIPELINE)
    other = connect(zookeeper.settings())
    try:
        # Another worker (a cache of its own) applies lint's result meanwhile.
        other_world = World(other)
        other_world.run(other_world.executor, {"result": "SUCCESS", "data": {}})
        other_world.process()
    finally:
        other.stop()
        other.close()
    items.keep(TENANT, PIPELINE, kept)  # this process's cache, as it was
    jobs = world.state().items[item_uuid].buildset.jobs
    assert jobs is not None and jobs["lint"].result is Result.SUCCESS
    world.process()  # nothing new for this worker: nothing requested twice
    assert [r.job_name for r in world.executor.pending()] == ["unit"]


def test_a_failed_commit_leaves_the_cache_as_zookeeper_is(client: ZooKeeperClient) -> None:
    state = written(client, sample_state())
    store = PipelineStore(client)
    with lock(client, state) as held:
        tree = store.read(state.tenant, state.pipeline, locked=True)
        mine = store.state(state.tenant, state.pipeline, tree)
        store.write(held.context, tree, read(client, state))  # someone commits first
        mine.items["i0"].message = "never committed"
        build_of(mine, "i0", "lint").result_data["k"] = "never committed"
        with pytest.raises(OpFailedError):
            store.write(held.context, tree, mine)  # based on the older read
    again = read(client, state)
    assert again.items["i0"].message == ""
    assert build_of(again, "i0", "lint").result_data == {"k": 0}


def test_a_pass_that_raises_leaves_the_cache_consistent(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    world.enqueue("feature")
    world.process()
    world.run(world.merger, {"ok": True})
    world.process()
    before = world.state()
    world.run(world.executor, {"result": "SUCCESS", "data": {"artifact": "x"}})

    def fail(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("the worker dies before its commit")

    monkeypatch.setattr(processing.PipelinePass, "commit", fail)
    with pytest.raises(RuntimeError):
        world.process()  # the manager applied the result to its items, then this
    assert world.state() == before  # the cache still says what ZooKeeper says
    monkeypatch.undo()
    world.process()  # the event is still queued: applied now
    lint = next(iter(world.state().items.values())).buildset.jobs
    assert lint is not None and lint["lint"].result is Result.SUCCESS


def test_a_released_lock_refuses_and_leaves_the_cache(client: ZooKeeperClient) -> None:
    state = written(client, sample_state())
    store = PipelineStore(client)
    held = lock(client, state)
    tree = store.read(state.tenant, state.pipeline)
    mine = store.state(state.tenant, state.pipeline, tree)
    mine.items["i1"].message = "never committed"
    held.release()
    with pytest.raises(LockLostError):
        store.write(held.context, tree, mine)
    assert read(client, state).items["i1"].message == ""


# ------------------------------------------------------------------ copies


def test_mutating_a_read_item_does_not_reach_the_cache(client: ZooKeeperClient) -> None:
    state = written(client, sample_state())
    mine = read(client, state)
    item = mine.items["i0"]
    assert item.buildset.repo_state is not None and item.buildset.jobs is not None
    item.buildset.repo_state["app"]["main"] = "changed"
    item.buildset.files.append("b.py")
    build_of(mine, "i0", "lint").result_data["k"] = "changed"
    item.buildset.jobs["unit"].builds.append(Build("b9", "unit", 2))
    item.buildset.jobs["extra"] = JobState(item.buildset.jobs["unit"].info)
    again = read(client, state)
    assert again.items["i0"] == state.items["i0"]
    assert again.items["i0"].buildset.repo_state == {"app": {"main": "abc"}}
    assert build_of(again, "i0", "lint").result_data == {"k": 0}


def test_mutating_after_a_write_does_not_reach_the_cache(client: ZooKeeperClient) -> None:
    state = written(client, sample_state())
    build_of(state, "i0", "lint").result_data["k"] = "after the commit"
    state.items["i1"].buildset.files.append("later.py")
    again = read(client, state)
    assert build_of(again, "i0", "lint").result_data == {"k": 0}
    assert again.items["i1"].buildset.files == ["a.py"]


def test_a_new_item_and_its_containers_are_written_incrementally(
    client: ZooKeeperClient, zookeeper: ZooKeeperTarget
) -> None:
    state = written(client, sample_state())
    mine = read(client, state)
    new = mine.items["i0"].clone()
    new.uuid, new.queue = "i2", "item:q2"
    new.buildset.uuid = "bs2"
    mine.items["i2"] = new
    mine.queues["item:q2"] = type(mine.queues["item:q0"])("item:q2", ["i2"])
    written(client, mine)
    fresh = connect(zookeeper.settings())
    try:
        items.forget(state.tenant, state.pipeline)
        seen = read(fresh, state)
    finally:
        fresh.stop()
        fresh.close()
    assert sorted(seen.items) == ["i0", "i1", "i2"]
    assert seen.items["i2"] == new
