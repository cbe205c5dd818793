"""The sweep asks a tenant to reconfigure only while no reconfiguration holds its lock.

A ``sluice reconfigure`` holding a tenant's write lock may wait for merges
on the merger worker that would run the sweep's reconfigure task; that
task would wait for the lock, be retried, and the next sweep would send
another: the merges it waits for fall behind a growing pile. So a tenant
whose write lock is held or waited for is left for the next sweep.
"""

from __future__ import annotations

from scheduler.reconfiguration import request_ops
from scheduler.views.idle import tenants_to_reconfigure
from scheduler.zk import locks, paths
from scheduler.zk.client import ZooKeeperClient
from scheduler.zk.context import Transaction


def test_a_tenant_being_reconfigured_is_left_for_the_next_sweep(zk: ZooKeeperClient) -> None:
    for tenant in ("one", "two"):
        txn = Transaction(zk)
        request_ops(zk, tenant, "a config change merged", txn)
        txn.commit()
    assert tenants_to_reconfigure(zk) == ["one", "two"]
    held = locks.acquire(
        zk, paths.tenant_lock("one"), kind=locks.LockKind.WRITE, identifier="reconfigure"
    )
    assert held is not None
    with held:
        assert tenants_to_reconfigure(zk) == ["two"]
        # a pipeline pass's read lock is no reconfiguration
        reader = locks.acquire(
            zk, paths.tenant_lock("two"), kind=locks.LockKind.READ, identifier="pass"
        )
        assert reader is not None
        with reader:
            assert tenants_to_reconfigure(zk) == ["two"]
    assert tenants_to_reconfigure(zk) == ["one", "two"]
