"""The image builder's steps against a real ZooKeeper and real scripts (no broker).

``build_image`` is the build task's body and ``check_images`` the builder's
tick; the end-to-end tests (tests/e2e/test_images.py) run both in real
Celery workers.
"""

from __future__ import annotations

import tarfile
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from scheduler.settings.images import DiskImageSettings, ImageProviderSettings, ImageSettings
from scheduler.stores.images import ImageBuild, ImageBuildState, ImageStore
from scheduler.zk.client import ZooKeeperClient
from workers.images.builder import (
    ImageBuilder,
    build_due,
    build_image,
    rebuild_jitter,
    stored_builder_id,
)
from workers.images.check import NudgeMemory, check_images

SCRIPT = """#!/bin/sh
set -e
mkdir -p "$SLUICE_IMAGE_ROOT/etc"
echo "image $SLUICE_IMAGE build $SLUICE_IMAGE_BUILD" > "$SLUICE_IMAGE_ROOT/etc/motd"
echo "made the root"
"""


def _builder(
    zk: ZooKeeperClient, tmp_path: Path, *, script: str = SCRIPT, **image: object
) -> ImageBuilder:
    path = tmp_path / "build.sh"
    path.write_text(script)
    path.chmod(0o755)
    disk = DiskImageSettings(name="base", script=path, providers=("local",), retry_delay=0.0)
    settings = ImageSettings(
        providers={"local": ImageProviderSettings("local", "local", tmp_path / "uploads")},
        diskimages={"base": replace(disk, **image)},  # type: ignore[arg-type]
    )
    return ImageBuilder("builder-1", tmp_path / "builds", settings, ImageStore(zk))


def _never(_: str) -> None:
    raise AssertionError("no nudge expected")


def test_a_requested_build_runs_the_script_and_is_uploaded(
    zk: ZooKeeperClient, tmp_path: Path
) -> None:
    builder = _builder(zk, tmp_path)
    builder.store.request_build("base")
    outcome = build_image(builder, "base")
    assert (outcome.outcome, outcome.reason) == ("ready", "requested")
    build = builder.store.build("base", outcome.build_id)
    assert build is not None and build.state == ImageBuildState.READY
    assert build.builder == "builder-1" and build.filename == f"base-{build.id}"
    motd = builder.build_dir / build.filename / "etc" / "motd"
    assert motd.read_text() == f"image base build {build.id}\n"
    assert "made the root" in builder.build_log(build).read_text()
    upload = builder.store.latest_upload("base", "local")
    assert upload is not None and upload.build_id == build.id
    assert upload.external_id == str(tmp_path / "uploads" / f"base-{build.id}-{upload.id}")
    assert (Path(upload.external_id) / "etc" / "motd").read_text() == motd.read_text()
    assert not builder.store.build_requested("base")
    again = build_image(builder, "base")
    assert again.outcome == "not-due", "built and not requested: nothing to do"


def test_a_build_under_someone_elses_lock_is_busy(zk: ZooKeeperClient, tmp_path: Path) -> None:
    builder = _builder(zk, tmp_path)
    held = builder.store.lock_builds("base", "builder-2")
    assert held is not None
    with held:
        assert build_image(builder, "base").outcome == "busy"
    assert builder.store.builds("base") == []


def test_a_failing_script_leaves_a_failed_build_and_waits_before_trying_again(
    zk: ZooKeeperClient, tmp_path: Path
) -> None:
    builder = _builder(zk, tmp_path, script="#!/bin/sh\necho broken\nexit 3\n", retry_delay=3600.0)
    outcome = build_image(builder, "base")
    assert (outcome.outcome, outcome.reason) == ("failed", "missing")
    build = builder.store.build("base", outcome.build_id)
    assert build is not None and build.state == ImageBuildState.FAILED
    assert not (builder.build_dir / build.filename).exists()
    assert "exit 3" in builder.build_log(build).read_text()
    assert build_image(builder, "base").outcome == "not-due", "retry_delay holds off"
    builder.store.request_build("base")
    assert build_image(builder, "base").outcome == "failed", "a request does not wait"
    assert builder.store.latest_upload("base", "local") is None


def test_tar_format_packs_the_root(zk: ZooKeeperClient, tmp_path: Path) -> None:
    builder = _builder(zk, tmp_path, format="tar")
    outcome = build_image(builder, "base")
    build = builder.store.build("base", outcome.build_id)
    assert build is not None and build.state == ImageBuildState.READY
    upload = builder.store.latest_upload("base", "local")
    assert upload is not None and upload.external_id.endswith(".tar.gz")
    with tarfile.open(upload.external_id) as tar:
        motd = tar.extractfile("./etc/motd")
        assert motd is not None and motd.read().decode().startswith("image base build")


def test_the_check_removes_own_incomplete_builds_and_leaves_others(
    zk: ZooKeeperClient, tmp_path: Path
) -> None:
    builder = _builder(zk, tmp_path)
    store = builder.store
    held = store.lock_builds("base", "builder-1")
    assert held is not None
    mine = store.start_build(held, "base", "builder-1")
    theirs = store.start_build(held, "base", "builder-2")
    (builder.build_dir / mine.filename).mkdir(parents=True)
    (builder.build_dir / f"{mine.filename}.log").write_text("half")
    nudged: list[str] = []
    report = check_images(builder, nudged.append, NudgeMemory(every=60))
    assert report.removed == [], "the lock is held: the build may be in progress"
    assert nudged == [], "someone holds the build lock"
    held.release()  # as when a builder's session ends with its process
    report = check_images(builder, nudged.append, NudgeMemory(every=60))
    assert report.removed == [f"base/{mine.id}"]
    assert not (builder.build_dir / mine.filename).exists()
    assert not (builder.build_dir / f"{mine.filename}.log").exists()
    assert [b.id for b in store.builds("base")] == [theirs.id]
    assert nudged == ["base"], "no ready build: the image is due"


def test_retention_keeps_the_newest_uploaded_builds_and_deletes_the_rest(
    zk: ZooKeeperClient, tmp_path: Path
) -> None:
    builder = _builder(zk, tmp_path, keep=1)
    store = builder.store
    first = build_image(builder, "base").build_id
    store.request_build("base")
    second = build_image(builder, "base").build_id
    old = store.latest_upload("base", "local")
    assert old is not None and old.build_id == second
    report = check_images(builder, _never, NudgeMemory(every=60))
    assert report.expired == [f"base/{first}"]
    report = check_images(builder, _never, NudgeMemory(every=60))
    assert report.deleted == [f"base/{first}"]
    assert [b.id for b in store.builds("base")] == [second]
    assert sorted(p.name for p in (tmp_path / "uploads").iterdir()) == [f"base-{second}-{old.id}"]
    assert not (builder.build_dir / f"base-{first}").exists()


def test_an_operators_delete_is_carried_out_by_the_builder(
    zk: ZooKeeperClient, tmp_path: Path
) -> None:
    builder = _builder(zk, tmp_path)
    build_id = build_image(builder, "base").build_id
    builder.store.mark_delete("base", build_id)
    assert builder.store.latest_upload("base", "local") is None
    nudged: list[str] = []
    report = check_images(builder, nudged.append, NudgeMemory(every=60))
    assert report.deleted == [f"base/{build_id}"]
    assert builder.store.builds("base") == []
    assert list((tmp_path / "uploads").iterdir()) == []
    assert nudged == ["base"], "nothing left: due again"


def _built(build_id: str, state: str, when: float) -> ImageBuild:
    return ImageBuild("base", build_id, "b", f"base-{build_id}", state, when)


def test_the_schedule_is_jittered_per_build() -> None:
    image = DiskImageSettings(
        "base", Path("x"), rebuild_interval=100.0, rebuild_jitter=50.0, retry_delay=10.0
    )
    spread = rebuild_jitter("base", "0000000001", 50.0)
    assert 0 <= spread < 50 and spread == rebuild_jitter("base", "0000000001", 50.0)
    assert spread != rebuild_jitter("base", "0000000002", 50.0)
    ready = [_built("0000000001", "ready", 1000.0)]
    assert build_due(image, [], False, 0.0) == "missing"
    assert build_due(image, ready, True, 1001.0) == "requested"
    assert build_due(image, ready, False, 1099.0) is None
    assert build_due(image, ready, False, 1100.0 + spread - 0.01) is None
    assert build_due(image, ready, False, 1100.0 + spread) == "scheduled"
    failed = [*ready, _built("0000000002", "failed", 1200.0)]
    assert build_due(image, failed, False, 1205.0) is None, "retry_delay after a failure"
    assert build_due(image, failed, False, 1210.0) == "scheduled"
    assert build_due(replace(image, rebuild_interval=0.0), ready, False, 1e12) is None


def test_the_builder_id_is_made_once_per_build_dir(tmp_path: Path) -> None:
    first = stored_builder_id(tmp_path / "a")
    assert first == stored_builder_id(tmp_path / "a")
    assert first != stored_builder_id(tmp_path / "b")


@pytest.mark.parametrize("name", ["", "nope"])
def test_unknown_image_is_an_error(zk: ZooKeeperClient, tmp_path: Path, name: str) -> None:
    from workers.images.builder import ImageBuildError

    with pytest.raises(ImageBuildError):
        build_image(_builder(zk, tmp_path), name)


def test_an_abandoned_upload_is_removed_and_made_again(
    zk: ZooKeeperClient, tmp_path: Path, make_client: Callable[..., ZooKeeperClient]
) -> None:
    build_id = build_image(_builder(zk, tmp_path, providers=()), "base").build_id
    builder = _builder(zk, tmp_path)
    build = builder.store.build("base", build_id)
    assert build is not None
    dead = make_client()
    held = ImageStore(dead).lock_upload(build, "local", "builder-1")
    assert held is not None
    abandoned = ImageStore(dead).start_upload(held, build, "local")
    partial = tmp_path / "uploads" / f".base-{build_id}-{abandoned.id}.partial"
    partial.mkdir(parents=True)
    report = check_images(builder, _never, NudgeMemory(every=60))
    assert report.uploaded == [], "its lock is held: the upload may be in progress"
    dead.stop()
    dead.close()  # its session ends: the upload lock goes, the upload stays "uploading"
    report = check_images(builder, _never, NudgeMemory(every=60))
    assert report.uploaded == [f"base/{build_id}/local"]
    assert not partial.exists()
    uploads = builder.store.uploads("base", build_id, "local")
    assert [u.state for u in uploads] == ["ready"] and uploads[0].id != abandoned.id


def test_builds_of_an_image_no_longer_configured_are_still_cleaned_up(
    zk: ZooKeeperClient, tmp_path: Path
) -> None:
    builder = _builder(zk, tmp_path)
    build_id = build_image(builder, "base").build_id
    gone = replace(builder, images=replace(builder.images, diskimages={}))
    report = check_images(gone, _never, NudgeMemory(every=60))
    assert not report, "nothing is marked or built for an image not configured"
    builder.store.mark_delete("base", build_id)
    report = check_images(gone, _never, NudgeMemory(every=60))
    assert report.deleted == [f"base/{build_id}"]
    assert not (builder.build_dir / f"base-{build_id}").exists()
