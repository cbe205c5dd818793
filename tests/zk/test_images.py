"""The image store against a real ZooKeeper: seed 004's tree, lock, states and reads."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from scheduler.stores.images import (
    ImageBuild,
    ImageBuildState,
    ImageStore,
    ImageStoreError,
    ImageUploadState,
)
from scheduler.zk import paths_nodepool, stored
from scheduler.zk.client import ZooKeeperClient, attach
from scheduler.zk.errors import FencedWriteError, LockLostError
from tests.fixtures.waiting import wait_until


def _ready_build(store: ImageStore, image: str, builder: str = "b1") -> ImageBuild:
    held = store.lock_builds(image, builder)
    assert held is not None
    with held:
        build = store.start_build(held, image, builder)
        return store.finish_build(held, build, ImageBuildState.READY)


def _upload(store: ImageStore, build: ImageBuild, provider: str, state: str, external: str) -> None:
    held = store.lock_upload(build, provider, "b1")
    assert held is not None
    with held:
        upload = store.start_upload(held, build, provider)
        store.finish_upload(held, upload, state, external)


def test_builds_are_sequence_nodes_beside_the_lock_with_the_seeds_fields(
    zk: ZooKeeperClient,
) -> None:
    store = ImageStore(zk)
    first = _ready_build(store, "ubuntu")
    second = _ready_build(store, "ubuntu")
    assert int(second.id) == int(first.id) + 1 and len(first.id) == 10
    children = zk.get_children(paths_nodepool.image_builds("ubuntu"))
    assert sorted(children) == sorted(["lock", first.id, second.id])
    raw, _ = zk.get("/nodepool/image/ubuntu/builds/" + first.id)
    data = stored.decode(raw)
    assert data["builder"] == "b1"
    assert data["filename"] == f"ubuntu-{first.id}"
    assert data["state"] == "ready"
    assert data["state_time"] >= data["started"] > 0
    assert [b.id for b in store.builds("ubuntu")] == [first.id, second.id]
    assert store.images() == ["ubuntu"]


def test_one_builder_holds_the_build_lock(zk: ZooKeeperClient) -> None:
    store = ImageStore(zk)
    held = store.lock_builds("ubuntu", "b1")
    assert held is not None
    assert held.node.startswith("/nodepool/image/ubuntu/builds/lock/")
    assert store.lock_builds("ubuntu", "b2") is None
    assert store.build_lock_holders("ubuntu") == ["b1"]
    assert store.lock_builds("debian", "b2") is not None, "other images are free"
    held.release()
    assert store.build_lock_holders("ubuntu") == []
    again = store.lock_builds("ubuntu", "b2")
    assert again is not None
    again.release()


def test_request_build_flag_is_lowered_by_the_build_that_starts(zk: ZooKeeperClient) -> None:
    store = ImageStore(zk)
    store.request_build("ubuntu")
    store.request_build("ubuntu")  # idempotent
    assert zk.exists("/nodepool/image/ubuntu/request-build") is not None
    assert store.build_requested("ubuntu")
    held = store.lock_builds("ubuntu", "b1")
    assert held is not None
    with held:
        build = store.start_build(held, "ubuntu", "b1")
    assert build.state == ImageBuildState.BUILDING
    assert not store.build_requested("ubuntu")
    store.request_build("ubuntu")  # raised again while building: stays for the next build
    assert store.build_requested("ubuntu")


def test_writes_of_a_build_are_fenced_by_the_lock(
    make_client: Callable[..., ZooKeeperClient],
) -> None:
    a_client = make_client(session_timeout=1.0)
    store_a = ImageStore(a_client)
    held = store_a.lock_builds("ubuntu", "a")
    assert held is not None
    build = store_a.start_build(held, "ubuntu", "a")
    generation = a_client.session_generation
    session_id, password = a_client.kazoo.client_id
    twin = attach(a_client.settings, session_id, password)
    twin.stop()
    twin.close()  # the session ends on the server: the lock node is gone
    wait_until(lambda: a_client.session_generation > generation, timeout=10, what="A sees LOST")
    store_b = ImageStore(make_client())
    assert store_b.build_lock_holders("ubuntu") == []
    with pytest.raises(LockLostError):
        store_a.finish_build(held, build, ImageBuildState.READY)
    wait_until(lambda: a_client.state.value == "CONNECTED", timeout=10, what="A reconnected")
    with pytest.raises((LockLostError, FencedWriteError)):
        store_a.finish_build(held, build, ImageBuildState.READY)
    left = store_b.build("ubuntu", build.id)
    assert left is not None and left.state == ImageBuildState.BUILDING


def test_latest_upload_is_the_highest_ready_upload_of_the_highest_ready_build(
    zk: ZooKeeperClient,
) -> None:
    store = ImageStore(zk)
    assert store.latest_upload("ubuntu", "cloud") is None
    old = _ready_build(store, "ubuntu")
    _upload(store, old, "cloud", ImageUploadState.READY, "old-0")
    new = _ready_build(store, "ubuntu")
    _upload(store, new, "cloud", ImageUploadState.READY, "new-0")
    _upload(store, new, "cloud", ImageUploadState.READY, "new-1")
    _upload(store, new, "cloud", ImageUploadState.FAILED, "")
    _upload(store, new, "other", ImageUploadState.READY, "other-0")
    held = store.lock_builds("ubuntu", "b1")
    assert held is not None
    with held:
        store.start_build(held, "ubuntu", "b1")  # building: never used
    latest = store.latest_upload("ubuntu", "cloud")
    assert latest is not None
    assert (latest.build_id, latest.external_id, latest.state) == (new.id, "new-1", "ready")
    path = f"/nodepool/image/ubuntu/builds/{new.id}/provider/cloud/images/{latest.id}"
    assert latest.path == path and zk.exists(path) is not None
    assert [u.external_id for u in store.uploads("ubuntu", new.id, "cloud")] == [
        "new-0",
        "new-1",
        "",
    ]
    assert store.providers("ubuntu", new.id) == ["cloud", "other"]
    store.mark_delete("ubuntu", new.id)
    latest = store.latest_upload("ubuntu", "cloud")
    assert latest is not None and latest.external_id == "old-0"
    assert store.latest_upload("ubuntu", "nowhere") is None


def test_delete_is_a_state_then_the_node_goes(zk: ZooKeeperClient) -> None:
    store = ImageStore(zk)
    build = _ready_build(store, "ubuntu")
    _upload(store, build, "cloud", ImageUploadState.READY, "x")
    marked = store.mark_delete("ubuntu", build.id)
    assert marked.state == ImageBuildState.DELETE
    assert store.mark_delete("ubuntu", build.id).state == ImageBuildState.DELETE
    again = store.build("ubuntu", build.id)
    assert again is not None and again.state == "delete" and again.version == marked.version
    with pytest.raises(ImageStoreError):
        store.mark_delete("ubuntu", "0000009999")
    store.remove_build(marked)
    assert store.build("ubuntu", build.id) is None
    assert store.builds("ubuntu") == []


def test_a_build_marked_delete_meanwhile_cannot_become_ready(zk: ZooKeeperClient) -> None:
    store = ImageStore(zk)
    held = store.lock_builds("ubuntu", "b1")
    assert held is not None
    with held:
        build = store.start_build(held, "ubuntu", "b1")
        store.mark_delete("ubuntu", build.id)
        with pytest.raises(ImageStoreError):
            store.finish_build(held, build, ImageBuildState.READY)
    left = store.build("ubuntu", build.id)
    assert left is not None and left.state == ImageBuildState.DELETE
