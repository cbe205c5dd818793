"""Leaked semaphore holders (their buildset is gone) are released by the sweep."""

from __future__ import annotations

from scheduler.model.item import PipelineState
from scheduler.state.store import PipelineStore
from scheduler.sweep import release_leaked_semaphores
from scheduler.zk import locks, paths
from scheduler.zk.client import connect
from scheduler.zk.semaphores import Semaphore
from tests.fixtures.services import ZooKeeperTarget
from tests.scheduler.test_state_store import sample_state


def test_only_holders_without_a_buildset_are_released(zookeeper: ZooKeeperTarget) -> None:
    client = connect(zookeeper.settings())
    try:
        state: PipelineState = sample_state()  # buildsets bs0 and bs1
        store = PipelineStore(client)
        held = locks.acquire(client, paths.pipeline_lock(state.tenant, state.pipeline))
        assert held is not None
        with held:
            store.write(held.context, store.read(state.tenant, state.pipeline), state)
        tenant_sem = Semaphore(client, paths.semaphore(state.tenant, "db"))
        global_sem = Semaphore(client, paths.global_semaphore("prod"))
        assert tenant_sem.acquire("bs0/unit", 5)
        assert tenant_sem.acquire("gone/unit", 5)
        assert global_sem.acquire("also-gone/deploy", 5)

        released = release_leaked_semaphores(client)

        assert sorted(h.rsplit(":", 1)[1] for h in released) == ["also-gone/deploy", "gone/unit"]
        assert tenant_sem.holders() == ["bs0/unit"]
        assert global_sem.holders() == []
    finally:
        client.stop()
        client.close()
