"""Document trees (scheduler/zk/doctree.py): a diff, or known changes, in one transaction."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from scheduler.zk import doctree, locks
from scheduler.zk.client import ZooKeeperClient

ROOT = "/tree/p"
Client = Callable[..., ZooKeeperClient]


def read(client: ZooKeeperClient, paths: list[str]) -> doctree.DocTree:
    tree = doctree.DocTree(ROOT)
    doctree.get_many(client, tree, paths)
    return tree


def start(client: ZooKeeperClient) -> doctree.DocTree:
    """A tree of a root, two items (one with a child) under a container."""
    docs = {
        ROOT: {"n": 0},
        f"{ROOT}/item/a": {"v": 1},
        f"{ROOT}/item/a/job/x": {"v": 1},
        f"{ROOT}/item/b": {"v": 1},
    }
    with locks.try_exclusive(client, "/tree-lock") as held:
        assert held is not None
        return doctree.write_diff(held.context, doctree.DocTree(ROOT), docs)


def test_known_changes_are_written_as_a_diff_would_be(make_client: Client) -> None:
    client = make_client()
    before = start(client)
    changes = {ROOT: {"n": 1}, f"{ROOT}/item/b": {"v": 2}, f"{ROOT}/item/c/job/y": {"v": 1}}
    gone = [f"{ROOT}/item/a/job/x", f"{ROOT}/item/a"]
    with locks.try_exclusive(client, "/tree-lock") as held:
        assert held is not None
        after = doctree.write_changes(held.context, before, changes, gone)
    assert after.docs == {
        ROOT: {"n": 1},
        f"{ROOT}/item/b": {"v": 2},
        f"{ROOT}/item/c/job/y": {"v": 1},
    }
    assert after.root_version == before.root_version + 1
    assert client.exists(f"{ROOT}/item/a") is None  # the item and its child are gone
    assert client.exists(f"{ROOT}/item/c") is not None  # the container on the way was made
    again = read(client, list(after.docs))
    assert again.docs == after.docs and again.versions == {
        path: after.versions[path] for path in again.versions
    }


def test_an_unchanged_document_is_not_written(make_client: Client) -> None:
    client = make_client()
    before = start(client)
    version = client.exists(f"{ROOT}/item/b")
    with locks.try_exclusive(client, "/tree-lock") as held:
        assert held is not None
        doctree.write_changes(held.context, before, {ROOT: {"n": 1}}, [])
    assert client.exists(f"{ROOT}/item/b") == version
    assert (client.exists(ROOT) or pytest.fail("root gone")).version == before.root_version + 1


def test_the_root_is_always_written(make_client: Client) -> None:
    client = make_client()
    before = start(client)
    with locks.try_exclusive(client, "/tree-lock") as held:
        assert held is not None
        with pytest.raises(ValueError, match="root document"):
            doctree.write_changes(held.context, before, {f"{ROOT}/item/b": {"v": 3}}, [])
