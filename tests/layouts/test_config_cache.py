"""The config cache round trip: files by digest, branch indexes, consistency, pruning."""

from __future__ import annotations

import base64
import random
import threading
from collections.abc import Callable

import pytest

from scheduler.stores import config_cache as cc
from scheduler.zk import paths
from scheduler.zk.client import ZooKeeperClient
from scheduler.zk.context import LockContext
from tests.fixtures.waiting import wait_until


def _big_text(size: int) -> str:
    """Text that does not compress much, so it really needs shards."""
    rng = random.Random(7)
    return base64.b64encode(rng.randbytes(size * 3 // 4)).decode("ascii")


def test_files_round_trip_including_a_file_over_one_megabyte(client: ZooKeeperClient) -> None:
    context = LockContext(client)
    big = _big_text(2_500_000)
    files = {
        "zuul.d/big.yaml": big,
        ".zuul.yaml": "- job: {name: unit}\n",
        "zuul.d/caf\u00e9.yaml": "# caf\u00e9 \U0001f600\n",
        "zuul.d/raw.yaml": "bad byte: \udcff\n",  # what a checkout gives for invalid UTF-8
        "zuul.d/empty.yaml": "",
        "zuul.d/same.yaml": "- job: {name: unit}\n",  # same content, one node
    }
    index = cc.write_branch(context, cc.BranchFiles("git", "org/app", "feature/x", files))
    got = cc.read_branch(client, "git", "org/app", "feature/x")
    assert got is not None
    read_index, branch = got
    assert dict(branch.files) == files
    assert read_index == index
    assert index.hash == cc.index_hash({p: cc.file_digest(t) for p, t in files.items()})
    node = paths.config_file("git", "org/app", "feature/x", cc.file_digest(big))
    assert any(c.startswith("%shard-") for c in client.get_children(node))
    assert len(client.get_children(paths.parent(node))) == len(files) - 1
    assert cc.cached_branches(client, "git", "org/app") == ["feature/x"]


def test_an_unchanged_branch_is_not_written_again(client: ZooKeeperClient) -> None:
    context = LockContext(client)
    branch = cc.BranchFiles("git", "app", "main", {".zuul.yaml": "- job: {name: a}\n"})
    first = cc.write_branch(context, branch)
    again = cc.write_branch(context, branch)
    assert (again.version, again.mzxid) == (first.version, first.mzxid)
    changed = cc.write_branch(
        context, cc.BranchFiles("git", "app", "main", {".zuul.yaml": "- job: {name: b}\n"})
    )
    assert changed.version == first.version + 1 and changed.mzxid > first.mzxid


def test_prune_keeps_what_an_index_or_a_layout_state_names(client: ZooKeeperClient) -> None:
    context = LockContext(client)
    v1 = cc.BranchFiles("git", "app", "main", {".zuul.yaml": "one\n"})
    v2 = cc.BranchFiles("git", "app", "main", {".zuul.yaml": "two\n"})
    v3 = cc.BranchFiles("git", "app", "main", {".zuul.yaml": "three\n"})
    cc.write_branch(context, v1)
    cc.save_layout_state(context, "t", {"uuid": "u1"}, [v1])  # a layout still uses v1
    cc.write_branch(context, v2)
    cc.write_branch(context, v3)
    assert cc.prune(context, "git", "app", "main") == 1  # v2: nobody names it
    source = cc.SourceRef.of(v1)
    assert cc.read_files(client, source) == dict(v1.files)
    assert dict(cc.read_branch(client, "git", "app", "main")[1].files) == dict(v3.files)  # type: ignore[index]
    with pytest.raises(cc.CacheMissError):
        cc.read_files(client, cc.SourceRef.of(v2))


def test_a_layout_state_rewrites_pruned_files_it_needs(client: ZooKeeperClient) -> None:
    context = LockContext(client)
    old = cc.BranchFiles("git", "app", "main", {".zuul.yaml": "old\n"})
    cc.write_branch(context, old)
    cc.write_branch(context, cc.BranchFiles("git", "app", "main", {".zuul.yaml": "new\n"}))
    assert cc.prune(context, "git", "app", "main") == 1
    record = cc.save_layout_state(context, "t", {"uuid": "u"}, [old])
    assert record.data["uuid"] == "u"
    assert cc.read_files(client, record.sources[0]) == {".zuul.yaml": "old\n"}
    assert cc.load_layout_state(client, "t") == record
    assert cc.layout_tenants(client) == ["t"]


def test_a_removed_branch_reads_as_absent(client: ZooKeeperClient) -> None:
    context = LockContext(client)
    cc.write_branch(context, cc.BranchFiles("git", "app", "old", {".zuul.yaml": "x\n"}))
    cc.remove_branch(context, "git", "app", "old")
    assert cc.read_branch(client, "git", "app", "old") is None
    assert cc.prune(context, "git", "app", "old") == 1


def test_a_reader_never_sees_half_a_branch_update(
    client: ZooKeeperClient, make_client: Callable[[], ZooKeeperClient]
) -> None:
    writer = LockContext(client)
    reader = make_client()

    def version(n: int) -> cc.BranchFiles:
        files = {f"zuul.d/{i}.yaml": f"# version {n}\n" for i in range(4)}
        return cc.BranchFiles("git", "app", "main", files)

    cc.write_branch(writer, version(0))
    seen: set[str] = set()
    stop = threading.Event()
    errors: list[BaseException] = []

    def read() -> None:
        try:
            while not stop.is_set():
                got = cc.read_branch(reader, "git", "app", "main")
                assert got is not None
                texts = set(got[1].files.values())
                assert len(texts) == 1, texts  # all files of one version
                assert got[0].hash == got[1].content_hash()
                seen.update(texts)
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=read)
    thread.start()
    for n in range(1, 30):
        cc.write_branch(writer, version(n))
        cc.prune(writer, "git", "app", "main")  # old versions vanish under the reader
    wait_until(lambda: len(seen) > 3 or errors, what="the reader to see several versions")
    stop.set()
    thread.join(30)
    assert not errors, errors
