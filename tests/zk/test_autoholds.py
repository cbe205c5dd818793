"""The scheduler's view of autoholds: one listing per few seconds, not one per build."""

from __future__ import annotations

import time

from scheduler.stores.autoholds import AutoholdIndex, AutoholdStore
from scheduler.zk.client import ZooKeeperClient


def test_the_index_lists_once_per_ttl_and_sees_changes_after_it(zk: ZooKeeperClient) -> None:
    index = AutoholdIndex(zk, ttl=0.3)
    assert not index.wants("t", "app", "unit", "refs/changes/1")
    store = AutoholdStore(zk)
    request = store.add("t", "app", "unit", ref="changes/1")
    assert not index.wants("t", "app", "unit", "refs/changes/1"), "cached for the ttl"
    time.sleep(0.35)
    assert index.wants("t", "app", "unit", "refs/changes/1")
    assert not index.wants("t", "app", "lint", "refs/changes/1")
    assert not index.wants("t", "app", "unit", "refs/changes/2")
    store.delete(request.id)
    time.sleep(0.35)
    assert not index.wants("t", "app", "unit", "refs/changes/1")
