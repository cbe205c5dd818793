"""Building one image: the build lock, the script, the artifact, the outcome.

:func:`build_image` is the body of the ``sluice.builder.build`` task. It
takes the image's build lock without waiting (another builder building the
image means there is nothing to do), removes this builder's incomplete
builds of the image (a crash left them ``building``: their lock went with
the session), asks :func:`build_due` whether a build is wanted now, and if
so creates the ``building`` build, runs the image's script and records
``ready`` or ``failed``, every write fenced by the lock. A ready build is
then uploaded to the image's providers (:mod:`workers.images.uploads`).

The script gets ``SLUICE_IMAGE``, ``SLUICE_IMAGE_BUILD`` and
``SLUICE_IMAGE_ROOT`` (an empty folder it fills: the image's root file
system) and runs under the executor's reaper, so a timeout or the death of
the worker leaves none of its processes behind. Its output is kept in
``<build_dir>/<image>-<build>.log``. With ``format: tar`` the folder is then
packed into ``<image>-<build>.tar.gz``.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import socket
import tarfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scheduler.errors import SluiceError
from scheduler.settings.images import DiskImageSettings, ImageSettings
from scheduler.settings.sections import Settings
from scheduler.stores.images import ImageBuild, ImageBuildState, ImageStore, ImageStoreError
from scheduler.wire.build_result import StepOutcome
from scheduler.zk.client import ZooKeeperClient
from workers.executor.joblog import JobLog, LineSplitter
from workers.executor.process import StepLimits, run_step
from workers.images.uploads import upload_build

log = logging.getLogger(__name__)

BUILDER_ID_FILE = "builder-id"


class ImageBuildError(SluiceError):
    """A build asked for an image the settings do not name."""


@dataclass(frozen=True)
class ImageBuilder:
    """This builder: who it is, where its builds live, the settings and the store."""

    builder_id: str
    build_dir: Path
    images: ImageSettings
    store: ImageStore

    @classmethod
    def from_settings(cls, settings: Settings, client: ZooKeeperClient) -> ImageBuilder:
        build_dir = settings.images.build_dir or settings.state_dir / "images"
        builder_id = settings.images.builder_id or stored_builder_id(build_dir)
        return cls(builder_id, build_dir, settings.images, ImageStore(client))

    def artifact(self, build: ImageBuild) -> Path:
        """The build's root folder, or its archive for ``format: tar``."""
        suffix = ".tar.gz" if build.format == "tar" else ""
        return self.build_dir / f"{build.filename}{suffix}"

    def build_log(self, build: ImageBuild) -> Path:
        return self.build_dir / f"{build.filename}.log"

    def remove_files(self, build: ImageBuild, *, keep_log: bool = False) -> None:
        """Remove whatever of the build is on this builder's disk (idempotent)."""
        if not build.filename:
            return
        root = self.build_dir / build.filename
        for path in (root, root.with_name(root.name + ".tar.gz"), self.artifact(build)):
            _remove(path)
        if not keep_log:
            _remove(self.build_log(build))


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def stored_builder_id(build_dir: Path) -> str:
    """This builder's id, made once and kept in ``<build_dir>/builder-id``.

    It survives restarts, so a restarted builder knows which incomplete
    builds are its own; two builders with different build folders are two
    builders even on one host.
    """
    path = build_dir / BUILDER_ID_FILE
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        pass
    build_dir.mkdir(parents=True, exist_ok=True)
    made = f"{socket.gethostname()}-{uuid.uuid4().hex[:8]}"
    scratch = path.with_name(f".{BUILDER_ID_FILE}.{os.getpid()}")
    scratch.write_text(made + "\n")
    try:
        os.link(scratch, path)  # fails if another process made one first
    except FileExistsError:
        pass
    finally:
        scratch.unlink(missing_ok=True)
    return path.read_text().strip()


# ---------------------------------------------------------------- when to build


def rebuild_jitter(image: str, build_id: str, jitter: float) -> float:
    """This build's spread of the schedule: fixed per build, in ``[0, jitter)``.

    Derived from the build's id, so every builder computes the same due
    time (no herd at one instant, no disagreement between builders).
    """
    digest = hashlib.sha256(f"{image}/{build_id}".encode()).digest()
    return jitter * int.from_bytes(digest[:4], "big") / 2**32


def build_due(
    image: DiskImageSettings, builds: Sequence[ImageBuild], requested: bool, now: float
) -> str | None:
    """Why ``image`` should be built now (``requested``, ``missing``, ``scheduled``), or None.

    A failed last build holds off new tries for ``retry_delay`` seconds
    unless a build is requested.
    """
    if requested:
        return "requested"
    last = [b for b in builds if b.state in (ImageBuildState.READY, ImageBuildState.FAILED)]
    failed_last = last and last[-1].state == ImageBuildState.FAILED
    if failed_last and now - last[-1].state_time < image.retry_delay:
        return None
    ready = [b for b in builds if b.state == ImageBuildState.READY]
    if not ready:
        return "missing"
    if image.rebuild_interval <= 0:
        return None
    newest = ready[-1]
    spread = rebuild_jitter(image.name, newest.id, image.rebuild_jitter)
    if now >= newest.state_time + image.rebuild_interval + spread:
        return "scheduled"
    return None


# ---------------------------------------------------------------- building


@dataclass(frozen=True)
class ImageBuildOutcome:
    """What one build task did: ``busy``, ``not-due``, ``ready``, ``failed`` or ``deleted``."""

    image: str
    outcome: str
    build_id: str = ""
    reason: str = ""
    removed: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "image": self.image,
            "outcome": self.outcome,
            "build": self.build_id,
            "reason": self.reason,
            "removed": list(self.removed),
        }


def build_image(builder: ImageBuilder, name: str) -> ImageBuildOutcome:
    """Build ``name`` if it is due and nobody else builds it (idempotent; see the module doc)."""
    image = builder.images.image(name)
    if image is None:
        raise ImageBuildError(f"no image {name!r} in the images.diskimages settings")
    store = builder.store
    held = store.lock_builds(name, builder.builder_id)
    if held is None:
        return ImageBuildOutcome(name, "busy")
    with held:
        removed = tuple(remove_incomplete(builder, name))
        reason = build_due(image, store.builds(name), store.build_requested(name), time.time())
        if reason is None:
            return ImageBuildOutcome(name, "not-due", removed=removed)
        build = store.start_build(held, name, builder.builder_id, image.format)
        log.info("image %s: build %s started (%s)", name, build.id, reason)
        ok = run_script(builder, image, build)
        state = ImageBuildState.READY if ok else ImageBuildState.FAILED
        try:
            build = store.finish_build(held, build, state)
        except ImageStoreError as exc:  # an operator deleted it meanwhile
            log.warning("image %s: build %s: %s; its files go", name, build.id, exc)
            builder.remove_files(build)
            return ImageBuildOutcome(name, "deleted", build.id, reason, removed)
        log.info("image %s: build %s %s", name, build.id, state)
    if ok:
        upload_build(builder, build)
    else:
        builder.remove_files(build, keep_log=True)
    return ImageBuildOutcome(name, str(state), build.id, reason, removed)


def remove_incomplete(builder: ImageBuilder, name: str) -> list[str]:
    """Remove this builder's ``building`` builds of ``name``: files, then node.

    Call only while holding the image's build lock: then no build of the
    image is in progress, and a ``building`` build is one its builder
    never finished (seed 004: the restarted builder cleans up).
    """
    removed = []
    for build in builder.store.builds(name):
        if build.state == ImageBuildState.BUILDING and build.builder == builder.builder_id:
            log.warning("image %s: removing incomplete build %s", name, build.id)
            builder.remove_files(build)
            builder.store.remove_build(build)
            removed.append(build.id)
    return removed


def run_script(builder: ImageBuilder, image: DiskImageSettings, build: ImageBuild) -> bool:
    """Run the image's script into a fresh root folder; True if it made the artifact."""
    root = builder.build_dir / build.filename
    builder.remove_files(build)
    root.mkdir(parents=True)
    env = {
        **os.environ,
        "SLUICE_IMAGE": image.name,
        "SLUICE_IMAGE_BUILD": build.id,
        "SLUICE_IMAGE_ROOT": str(root),
    }
    joblog = JobLog(builder.build_log(build))
    try:
        joblog.marker(f"BUILD START: {image.name} {build.id} by {builder.builder_id}")
        if not os.access(image.script, os.X_OK):
            joblog.marker(f"BUILD END: {image.script} is not an executable file")
            return False
        started = time.monotonic()
        limits = StepLimits(deadline=started + image.timeout, cancel_requested=lambda: False)
        ended = run_step(
            image.script,
            cwd=builder.build_dir,
            env=env,
            output=LineSplitter(joblog, "build"),
            limits=limits,
        )
        took = time.monotonic() - started
        joblog.marker(f"BUILD END: {ended.outcome} exit {ended.exit_code} ({took:.2f}s)")
        if ended.outcome != StepOutcome.OK:
            return False
        if image.format == "tar":
            _pack(root, builder.artifact(build))
        return True
    finally:
        joblog.close()


def _pack(root: Path, archive: Path) -> None:
    """``root``'s content as ``archive`` (gzip tar); the folder is removed after."""
    scratch = archive.with_name(f".{archive.name}.partial")
    with tarfile.open(scratch, "w:gz") as tar:
        tar.add(root, arcname=".")
    os.replace(scratch, archive)
    shutil.rmtree(root, ignore_errors=True)
