"""Pipeline state in ZooKeeper: round trip, incremental writes, fencing, cache validation."""

from __future__ import annotations

import pytest

from scheduler.config.model import Dependency
from scheduler.model.build import Build, BuildState, JobInfo, JobState
from scheduler.model.change import Change
from scheduler.model.item import BuildSet, ChangeQueue, MergeState, PipelineState, QueueItem
from scheduler.model.results import Result
from scheduler.state import codec
from scheduler.state.store import PipelineStore
from scheduler.zk import locks, paths
from scheduler.zk.client import ZooKeeperClient, connect
from scheduler.zk.context import OpFailedError
from scheduler.zk.errors import LockLostError
from tests.fixtures.services import ZooKeeperTarget


def sample_state() -> PipelineState:
    state = PipelineState("tenant one", "check")
    for n in range(2):
        jobs = {
            "lint": JobState(
                JobInfo("lint", spec={"run": ["lint.sh"]}),
                [
                    Build(
                        f"b{n}1",
                        "lint",
                        1,
                        BuildState.COMPLETED,
                        Result.SUCCESS,
                        result_data={"k": n},
                    )
                ],
            ),
            "unit": JobState(
                JobInfo("unit", dependencies=(Dependency("lint"),)),
                [Build(f"b{n}2", "unit", 1, BuildState.RUNNING)],
            ),
        }
        buildset = BuildSet(
            f"bs{n}",
            MergeState.COMPLETE,
            "m1",
            repo_state={"app": {"main": "abc"}},
            files=["a.py"],
            jobs=jobs,
        )
        item = QueueItem(
            f"i{n}",
            Change("local", "app", "main", f"feature/{n}", "c1"),
            f"item:q{n}",
            buildset,
            1000.0 + n,
        )
        state.items[item.uuid] = item
        state.queues[item.queue] = ChangeQueue(item.queue, [item.uuid])
    return state


def lock(client: ZooKeeperClient, state: PipelineState) -> locks.HeldLock:
    held = locks.try_exclusive(client, paths.pipeline_lock(state.tenant, state.pipeline))
    assert held is not None
    return held


def test_round_trip_through_a_fresh_reader(
    client: ZooKeeperClient, zookeeper: ZooKeeperTarget
) -> None:
    state = sample_state()
    store = PipelineStore(client)
    with lock(client, state) as held:
        store.write(held.context, store.read(state.tenant, state.pipeline), state)
    other = connect(zookeeper.settings())
    try:
        tree = PipelineStore(other).read(state.tenant, state.pipeline)
        again = PipelineStore.state(state.tenant, state.pipeline, tree)
    finally:
        other.stop()
        other.close()
    assert codec.encode(again) == codec.encode(state)


def test_only_changed_nodes_are_written(client: ZooKeeperClient) -> None:
    state = sample_state()
    store = PipelineStore(client)
    with lock(client, state) as held:
        tree = store.write(held.context, store.read(state.tenant, state.pipeline), state)
        ref = paths.BuildsetRef(state.tenant, state.pipeline, "i0", "bs0")
        build_path = paths.build(ref, "unit", "b02")
        lint_path = paths.build(ref, "lint", "b01")
        before_lint = client.exists(lint_path).mzxid
        root_version = client.exists(tree.root).version

        jobs = state.items["i0"].buildset.jobs
        assert jobs is not None
        current = jobs["unit"].current
        assert current is not None
        current.state = BuildState.COMPLETED
        current.result = Result.FAILURE
        store.write(held.context, tree, state)

    assert client.exists(lint_path).mzxid == before_lint  # untouched
    assert client.exists(build_path).version == 1
    assert client.exists(tree.root).version == root_version + 1


def test_removing_an_item_removes_its_subtree(client: ZooKeeperClient) -> None:
    state = sample_state()
    store = PipelineStore(client)
    with lock(client, state) as held:
        tree = store.write(held.context, store.read(state.tenant, state.pipeline), state)
        state.remove(state.items["i1"])
        store.write(held.context, tree, state)
    assert client.exists(paths.item(state.tenant, state.pipeline, "i1")) is None
    assert client.exists(paths.item(state.tenant, state.pipeline, "i0")) is not None


def test_a_stale_read_cannot_commit(client: ZooKeeperClient) -> None:
    state = sample_state()
    store = PipelineStore(client)
    with lock(client, state) as held:
        tree = store.write(held.context, store.read(state.tenant, state.pipeline), state)
        store.write(held.context, tree, state)  # bumps the root
        with pytest.raises(OpFailedError):
            store.write(held.context, tree, state)  # based on the older read


def test_a_released_lock_refuses_the_write(client: ZooKeeperClient) -> None:
    state = sample_state()
    store = PipelineStore(client)
    held = lock(client, state)
    tree = store.read(state.tenant, state.pipeline)
    held.release()
    with pytest.raises(LockLostError):
        store.write(held.context, tree, state)


def test_the_cache_is_validated_against_zookeeper(
    client: ZooKeeperClient, zookeeper: ZooKeeperTarget
) -> None:
    state = sample_state()
    store = PipelineStore(client)
    with lock(client, state) as held:
        store.write(held.context, store.read(state.tenant, state.pipeline), state)
    other = connect(zookeeper.settings())
    try:
        other_store = PipelineStore(other)
        tree = other_store.read(state.tenant, state.pipeline)
        changed = PipelineStore.state(state.tenant, state.pipeline, tree)
        changed.items["i0"].message = "written elsewhere"
        with lock(other, state) as held:
            other_store.write(held.context, tree, changed)
    finally:
        other.stop()
        other.close()
    again = PipelineStore.state(
        state.tenant, state.pipeline, store.read(state.tenant, state.pipeline)
    )
    assert again.items["i0"].message == "written elsewhere"


def test_a_reader_without_the_lock_never_sees_a_torn_tree(
    client: ZooKeeperClient, zookeeper: ZooKeeperTarget
) -> None:
    import threading

    from scheduler.model.item import BuildSet

    state = sample_state()
    store = PipelineStore(client)
    stop = threading.Event()
    errors: list[BaseException] = []

    def writer() -> None:
        try:
            with lock(client, state) as held:
                tree = store.read(state.tenant, state.pipeline)
                for n in range(40):
                    for item in state.items.values():  # a reset: a new buildset each time
                        jobs = item.buildset.jobs
                        item.buildset = BuildSet(
                            f"bs-{n}-{item.uuid}",
                            MergeState.COMPLETE,
                            jobs=jobs,
                            repo_state={"app": {"main": "x"}},
                        )
                    tree = store.write(held.context, tree, state)
        except BaseException as exc:  # reported to the test thread
            errors.append(exc)
        finally:
            stop.set()

    reader_client = connect(zookeeper.settings())
    thread = threading.Thread(target=writer)
    thread.start()
    reads = 0
    try:
        reader = PipelineStore(reader_client)
        while not stop.is_set():
            seen = PipelineStore.state(
                state.tenant, state.pipeline, reader.read(state.tenant, state.pipeline)
            )
            for item in seen.items.values():
                assert item.buildset.jobs is not None
                assert sorted(item.buildset.jobs) == ["lint", "unit"], "a torn read"
            reads += 1
    finally:
        thread.join()
        reader_client.stop()
        reader_client.close()
    assert not errors, errors
    assert reads > 0
