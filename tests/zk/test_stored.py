"""Stored objects and sharded blobs: schema, compression, sharding, size limits."""

from __future__ import annotations

import json
import os
import zlib

import pytest

from scheduler.zk import locks, sharding, stored
from scheduler.zk.client import ZooKeeperClient
from scheduler.zk.context import LockContext, OpFailedError, Transaction
from scheduler.zk.errors import DataTooLargeError, DecodeError, NoDataError


def test_small_object_round_trips_as_plain_json(zk: ZooKeeperClient) -> None:
    ctx = LockContext(zk)
    stored.save(ctx, "/system/conf", {"tenants": ["a", "b"], "ünï": "✓"})
    raw, _ = zk.get("/system/conf")
    assert json.loads(raw) == {"schema": stored.BASE_SCHEMA, "tenants": ["a", "b"], "ünï": "✓"}
    assert stored.load(ctx, "/system/conf").data["tenants"] == ["a", "b"]


def test_medium_object_is_compressed(zk: ZooKeeperClient) -> None:
    ctx = LockContext(zk)
    obj = {"log": "line of output\n" * 5000}
    stored.save(ctx, "/obj", obj)
    raw, _ = zk.get("/obj")
    assert raw[:1] == b"\x78" and len(raw) < 10_000
    assert stored.load(ctx, "/obj").data["log"] == obj["log"]


def test_five_megabytes_round_trip_sharded(zk: ZooKeeperClient) -> None:
    ctx = LockContext(zk)
    blob = os.urandom(2_500_000).hex()  # 5 MB of text (~2.5 MB after zlib)
    stored.save(ctx, "/layout-data/l1", {"blob": blob})
    raw, _ = zk.get("/layout-data/l1")
    assert raw.startswith(sharding.POINTER_MAGIC)
    shards = zk.get_children("/layout-data/l1")
    assert len(shards) >= 3 and all(s.startswith(sharding.SHARD_PREFIX) for s in shards)
    loaded = stored.load(ctx, "/layout-data/l1")
    assert loaded.data["blob"] == blob
    # Replacing it with a small object leaves no shards behind.
    stored.save(ctx, "/layout-data/l1", {"blob": "small"}, version=loaded.version)
    assert zk.get_children("/layout-data/l1") == []
    assert stored.load(ctx, "/layout-data/l1").data["blob"] == "small"


def test_rewrite_of_sharded_object_keeps_old_data_readable_until_commit(
    zk: ZooKeeperClient,
) -> None:
    ctx = LockContext(zk)
    first = {"blob": os.urandom(1_000_000).hex()}
    stored.save(ctx, "/big", first)
    second = {"blob": os.urandom(1_000_000).hex()}
    prepared = stored.prepare(ctx, "/big", second, exists=True)
    # Shards of the new generation are written, the pointer is not: readers see the old data.
    assert stored.load(ctx, "/big").data == {"schema": 1, **first}
    txn = Transaction(zk)
    prepared.add_to(txn)
    prepared.cleanup(zk, txn.commit())
    assert stored.load(ctx, "/big").data["blob"] == second["blob"]
    generations = {name.rsplit("-", 1)[0] for name in zk.get_children("/big")}
    assert len(generations) == 1  # the old generation's shards are gone


def test_placeholder_reads_as_absent(zk: ZooKeeperClient) -> None:
    zk.create("/being-written", b"")
    with pytest.raises(NoDataError):
        stored.load(LockContext(zk), "/being-written")
    with pytest.raises(NoDataError):
        stored.load(LockContext(zk), "/missing")


def test_data_that_can_never_fit_fails_at_once(
    zk: ZooKeeperClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sharding, "MAX_BLOB_SIZE", 2_000_000)  # keep the test quick
    huge = {"blob": os.urandom(2_000_000).hex()}
    with pytest.raises(DataTooLargeError, match="can never be stored"):
        stored.save(LockContext(zk), "/huge", huge)
    assert zk.exists("/huge") is None


def test_oversized_transaction_is_refused_before_sending(zk: ZooKeeperClient) -> None:
    txn = Transaction(zk)
    for i in range(3):
        txn.create(f"/n{i}", b"x" * 400_000)
    with pytest.raises(DataTooLargeError):
        txn.commit()
    assert zk.exists("/n0") is None


def test_compare_and_set(zk: ZooKeeperClient) -> None:
    ctx = LockContext(zk)
    stored.save(ctx, "/cas", {"n": 1})
    version = stored.load(ctx, "/cas").version
    stored.save(ctx, "/cas", {"n": 2}, version=version)
    with pytest.raises(OpFailedError) as failed:
        stored.save(ctx, "/cas", {"n": 3}, version=version)
    assert failed.value.reason == "bad-version"
    assert stored.load(ctx, "/cas").data["n"] == 2


def test_schema_versions() -> None:
    assert stored.decode(b'{"schema":1,"a":2}') == {"schema": 1, "a": 2}
    with pytest.raises(DecodeError, match="schema 99"):
        stored.decode(b'{"schema":99}', "/x")
    with pytest.raises(DecodeError, match="no schema"):
        stored.decode(b'{"a":1}', "/x")
    with pytest.raises(DecodeError, match="/x"):
        stored.decode(b"\xff garbage", "/x")
    assert stored.decode(zlib.compress(b'{"schema":1}'))["schema"] == 1
    with pytest.raises(DecodeError):
        stored.encode({"bad": object()})


def test_delete_removes_shards(zk: ZooKeeperClient) -> None:
    ctx = LockContext(zk)
    stored.save(ctx, "/gone", {"blob": os.urandom(600_000).hex()})
    assert stored.delete(ctx, "/gone")
    assert zk.exists("/gone") is None
    assert not stored.delete(ctx, "/gone")


def test_save_all_writes_everything_in_one_transaction_or_nothing(zk: ZooKeeperClient) -> None:
    held = locks.acquire(zk, "/locks/pipeline/t/gate")
    assert held is not None
    ctx = held.context
    big = {"log": os.urandom(400_000).hex()}  # would not fit three times in one transaction
    writes = [
        stored.Write("/tenant/t/pipeline/gate/item/i1", big),
        stored.Write("/tenant/t/pipeline/gate/item/i2", {"n": 2}),
        stored.Write("/tenant/t/pipeline/gate/item/i3", big),
    ]
    stored.save_all(ctx, writes)
    found = stored.load_many(ctx, [w.path for w in writes] + ["/tenant/t/missing"])
    assert sorted(found) == [w.path for w in writes]
    assert found[writes[0].path].data["log"] == big["log"]
    version = found[writes[1].path].version
    stored.save_all(ctx, [stored.Write(writes[1].path, {"n": 3}, version=version)])
    # A stale compare-and-set aborts the whole batch: the first write is not applied.
    with pytest.raises(OpFailedError):
        stored.save_all(
            ctx,
            [
                stored.Write(writes[0].path, {"n": "new"}),
                stored.Write(writes[1].path, {"n": 4}, version=version),
            ],
        )
    after = stored.load_many(ctx, [writes[0].path, writes[1].path])
    assert after[writes[0].path].data["log"] == big["log"]
    assert after[writes[1].path].data["n"] == 3
    held.release()
