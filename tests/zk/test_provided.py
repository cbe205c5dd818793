"""What a change's providing jobs left in a pipeline (``scheduler/stores/provided.py``)."""

from __future__ import annotations

import os
import time

from scheduler.model.build import JobInfo
from scheduler.model.change import Change
from scheduler.model.item import QueueItem
from scheduler.model.results import Result
from scheduler.stores import provided
from scheduler.zk import paths
from scheduler.zk.client import ZooKeeperClient
from scheduler.zk.context import Transaction
from tests.scheduler.gate_harness import Gate

IMAGE: dict[str, object] = {"zuul": {"artifacts": [{"name": "image", "url": "u"}]}}


def item_after(result: Result) -> QueueItem:
    """An item whose build-image (provides image) ended ``result``; unit provides nothing."""
    gate = Gate((JobInfo("build-image", provides=("image",)), JobInfo("unit")))
    gate.enqueue("a")
    gate.merge_all()
    item = gate.item("a")
    gate.run(gate.build_event(item, "build-image", result, IMAGE))
    return gate.item("a")


def write(zk: ZooKeeperClient, record: provided.ProvidedRecord) -> None:
    txn = Transaction(zk)
    provided.set_ops(zk, "t", "check", record, txn)
    txn.commit()


def test_a_record_keeps_each_providing_build_and_is_read_back(zk: ZooKeeperClient) -> None:
    item = item_after(Result.SUCCESS)
    record = provided.record_of(item, time.time())
    assert record is not None
    (build,) = record.builds  # unit provides nothing: not kept
    assert (build.job, build.result, build.provides) == ("build-image", "SUCCESS", ("image",))
    assert [a["name"] for a in build.artifacts] == ["image"]
    assert record.change.needs == ()
    write(zk, record)
    records = provided.ProvidedRecords(zk, "t", "check")
    assert records.get(item.change) == record
    # another patchset of the change has no record; nor a change never tested
    assert records.get(Change("local", "app", "main", "a", "other-commit")) is None
    assert records.get(Change("local", "app", "main", "b", "c1")) is None
    assert provided.ProvidedRecords(zk, "t", "gate").get(item.change) is None


def test_a_later_buildset_replaces_the_record(zk: ZooKeeperClient) -> None:
    first = provided.record_of(item_after(Result.SUCCESS), time.time())
    second = provided.record_of(item_after(Result.FAILURE), time.time())
    assert first is not None and second is not None
    write(zk, first)
    write(zk, second)
    found = provided.ProvidedRecords(zk, "t", "check").get(first.change)
    assert found is not None and found.builds[0].result == "FAILURE"


def test_an_item_without_providers_leaves_no_record() -> None:
    gate = Gate((JobInfo("unit"),))
    gate.enqueue("a")
    gate.merge_all()
    assert provided.record_of(gate.item("a"), time.time()) is None


def test_an_unreadable_record_counts_as_none_and_old_ones_are_pruned(zk: ZooKeeperClient) -> None:
    record = provided.record_of(item_after(Result.SUCCESS), time.time())
    assert record is not None
    write(zk, record)
    junk = paths.provided("t", "check", "local/app@main:junk")
    zk.create(junk, b"not json", makepath=True)
    junk_change = Change("local", "app", "main", "junk", "")
    assert provided.ProvidedRecords(zk, "t", "check").get(junk_change) is None
    assert provided.prune(zk) == ["t/check/local/app@main:junk"]  # unreadable: forgotten
    later = time.time() + provided.RETENTION + 60
    assert provided.prune(zk, now=later) == [f"t/check/{record.change.key}"]
    assert provided.ProvidedRecords(zk, "t", "check").get(record.change) is None


def test_a_record_too_large_keeps_its_results_without_artifacts(zk: ZooKeeperClient) -> None:
    noise = os.urandom(provided.MAX_RECORD_BYTES).hex()  # does not compress
    data: dict[str, object] = {"zuul": {"artifacts": [{"name": "big", "url": noise}]}}
    gate = Gate((JobInfo("build-image", provides=("image",)), JobInfo("unit")))
    gate.enqueue("a")
    gate.merge_all()
    gate.run(gate.build_event(gate.item("a"), "build-image", Result.SUCCESS, data))
    record = provided.record_of(gate.item("a"), time.time())
    assert record is not None
    write(zk, record)
    found = provided.ProvidedRecords(zk, "t", "check").get(record.change)
    assert found is not None
    assert [(b.result, b.artifacts) for b in found.builds] == [("SUCCESS", ())]
