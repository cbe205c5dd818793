"""Leaked semaphore holders (their buildset is gone) are released by the sweep."""

from __future__ import annotations

from scheduler.model.item import PipelineState
from scheduler.state.store import PipelineStore
from scheduler.stores.ledger import TxnLedger
from scheduler.stores.semaphores import SemaphoreNode
from scheduler.sweep import release_leaked_semaphores, wake_semaphore_waiters
from scheduler.zk import locks, paths
from scheduler.zk.client import connect
from scheduler.zk.context import Transaction
from tests.fixtures.services import ZooKeeperTarget
from tests.scheduler.test_state_store import sample_state


def test_only_holders_without_a_buildset_are_released(zookeeper: ZooKeeperTarget) -> None:
    client = connect(zookeeper.settings())
    try:
        state: PipelineState = sample_state()  # buildsets bs0 and bs1
        store = PipelineStore(client)
        held = locks.try_exclusive(client, paths.pipeline_lock(state.tenant, state.pipeline))
        assert held is not None
        with held:
            store.write(held.context, store.read(state.tenant, state.pipeline), state)
        tenant_sem = SemaphoreNode(client, paths.semaphore(state.tenant, "db"))
        global_sem = SemaphoreNode(client, paths.global_semaphore("prod"))
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


def test_waiters_are_recorded_by_passes_and_woken_by_the_sweep(
    zookeeper: ZooKeeperTarget,
) -> None:
    """A refused pass records its pipeline; a free slot gets the waiters nudged."""
    client = connect(zookeeper.settings())
    try:
        gate = TxnLedger(client, "t", {"deploy": 1}, pipeline="gate")
        assert gate.try_acquire("deploy", "bs-gate/deploy")
        txn = Transaction(client)
        gate.add_ops(txn)
        txn.commit()
        check = TxnLedger(client, "t", {"deploy": 1}, pipeline="check")
        assert not check.try_acquire("deploy", "bs-check/deploy")
        txn = Transaction(client)
        check.add_ops(txn)
        txn.commit()
        semaphore = SemaphoreNode(client, paths.semaphore("t", "deploy"))
        assert semaphore.waiters() == [("t", "check")]

        nudged: list[tuple[str, str]] = []
        assert wake_semaphore_waiters(client, lambda t, p: nudged.append((t, p))) == []
        # the holder's pass releases: it names the waiter to nudge after its commit
        release = TxnLedger(client, "t", {"deploy": 1}, pipeline="gate")
        release.release("deploy", "bs-gate/deploy")
        assert release.to_wake() == [("t", "check")]
        txn = Transaction(client)
        release.add_ops(txn)
        txn.commit()
        # that nudge was lost: the sweep finds the waiter of a free slot
        assert wake_semaphore_waiters(client, lambda t, p: nudged.append((t, p)))
        assert nudged == [("t", "check")]
        # the waiter's next pass takes the slot and leaves the waiters
        retry = TxnLedger(client, "t", {"deploy": 1}, pipeline="check")
        assert retry.try_acquire("deploy", "bs-check/deploy")
        txn = Transaction(client)
        retry.add_ops(txn)
        txn.commit()
        assert semaphore.waiters() == [] and semaphore.holders() == ["bs-check/deploy"]
    finally:
        client.stop()
        client.close()
