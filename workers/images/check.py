"""A builder's periodic check: clean up, upload, keep the newest builds, nudge due builds.

:func:`check_images` runs every ``images.check_interval`` seconds in every
builder (:mod:`workers.images.loop`). For each image in the settings
(steps 1 and 2 also for images no longer in the settings):

1. **incomplete builds**: this builder's builds still ``building`` are
   removed (files, then node) if it can take the build lock without
   waiting: then none of them is in progress, so they were left by a crash
   of this builder (seed 004). Another builder's are left to it.
2. **deletions**: this builder's builds in state ``delete`` are removed,
   uploads first (their copies, then their nodes), then the build's files
   and node. A build whose upload lock is held waits for the next check.
3. **uploads**: this builder's ready builds are uploaded to providers that
   have no ready upload (and no failed one within ``retry_delay``).
4. **retention** (any builder, compare-and-set): ready builds older than
   the newest ``keep`` builds that are uploaded everywhere, and failed
   builds other than the last finished one, are set to ``delete``.
5. **schedule**: when :func:`~workers.images.builder.build_due` says so and
   nobody holds the build lock, a ``sluice.builder.build`` nudge is sent
   (at most one per image every few checks: the task re-checks under the
   lock, so a duplicate costs one lock attempt).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from scheduler.settings.images import DiskImageSettings
from scheduler.stores.images import ImageBuild, ImageBuildState, ImageUploadState
from scheduler.zk import paths_nodepool
from workers.images.builder import ImageBuilder, build_due, remove_incomplete
from workers.images.uploads import remove_upload, upload_to

log = logging.getLogger(__name__)


@dataclass
class CheckReport:
    """What one check did, by image (for logs and tests)."""

    removed: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    uploaded: list[str] = field(default_factory=list)
    expired: list[str] = field(default_factory=list)
    nudged: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return any((self.removed, self.deleted, self.uploaded, self.expired, self.nudged))


@dataclass
class NudgeMemory:
    """When each image was last nudged, so a waiting nudge is not sent again every check."""

    every: float
    sent: dict[str, float] = field(default_factory=dict)

    def may_send(self, image: str, now: float) -> bool:
        return now - self.sent.get(image, float("-inf")) >= self.every

    def record(self, image: str, now: float) -> None:
        self.sent[image] = now


def check_images(
    builder: ImageBuilder,
    nudge: Callable[[str], None],
    memory: NudgeMemory,
    now: float | None = None,
) -> CheckReport:
    report = CheckReport()
    configured = builder.images.diskimages
    for name in sorted(set(builder.store.images()) - set(configured)):
        clean_image(builder, name, report)  # no longer configured: only clean up
    for name, image in sorted(configured.items()):
        check_image(builder, image, report)
        when = time.time() if now is None else now
        if _wants_nudge(builder, image, when) and memory.may_send(name, when):
            memory.record(name, when)
            nudge(name)
            report.nudged.append(name)
    return report


def clean_image(builder: ImageBuilder, name: str, report: CheckReport) -> list[ImageBuild]:
    """Steps 1 and 2: this builder's incomplete and deleted builds; its builds left after."""
    store = builder.store
    me = builder.builder_id
    mine = [b for b in store.builds(name) if b.builder == me]
    if any(b.state == ImageBuildState.BUILDING for b in mine):
        held = store.lock_builds(name, me)
        if held is not None:
            with held:
                report.removed += _named(name, remove_incomplete(builder, name))
    for build in mine:
        if build.state == ImageBuildState.DELETE and delete_build(builder, build):
            report.deleted.append(f"{name}/{build.id}")
    return mine


def check_image(builder: ImageBuilder, image: DiskImageSettings, report: CheckReport) -> None:
    store = builder.store
    mine = clean_image(builder, image.name, report)
    for build in mine:
        if build.state == ImageBuildState.READY:
            for provider in _missing_uploads(builder, image, build):
                if upload_to(builder, build, provider) is not None:
                    report.uploaded.append(f"{image.name}/{build.id}/{provider}")
    for build in expired(builder, image, store.builds(image.name)):
        store.mark_delete(image.name, build.id)
        report.expired.append(f"{image.name}/{build.id}")


def _named(image: str, ids: list[str]) -> list[str]:
    return [f"{image}/{i}" for i in ids]


def _wants_nudge(builder: ImageBuilder, image: DiskImageSettings, now: float) -> bool:
    store = builder.store
    requested = store.build_requested(image.name)
    if build_due(image, store.builds(image.name), requested, now) is None:
        return False
    return not store.build_lock_holders(image.name)


def _missing_uploads(
    builder: ImageBuilder, image: DiskImageSettings, build: ImageBuild
) -> list[str]:
    missing = []
    now = time.time()
    for provider in image.providers:
        uploads = builder.store.uploads(image.name, build.id, provider)
        if any(u.state == ImageUploadState.READY for u in uploads):
            continue
        uploading = any(u.state == ImageUploadState.UPLOADING for u in uploads)
        if uploading and builder.store.upload_lock_holders(build, provider):
            continue  # in progress; an abandoned one is removed by upload_to
        failed = [u for u in uploads if u.state == ImageUploadState.FAILED]
        if failed and now - failed[-1].state_time < image.retry_delay:
            continue
        missing.append(provider)
    return missing


def uploaded_everywhere(builder: ImageBuilder, image: DiskImageSettings, build: ImageBuild) -> bool:
    return all(
        any(
            u.state == ImageUploadState.READY
            for u in builder.store.uploads(image.name, build.id, provider)
        )
        for provider in image.providers
    )


def expired(
    builder: ImageBuilder, image: DiskImageSettings, builds: list[ImageBuild]
) -> list[ImageBuild]:
    """Builds to set to ``delete``: see the module docstring (step 4)."""
    ready = [b for b in builds if b.state == ImageBuildState.READY]
    complete = [b for b in ready if uploaded_everywhere(builder, image, b)]
    old: list[ImageBuild] = []
    if len(complete) >= image.keep:
        oldest_kept = int(complete[-image.keep].id)
        old = [b for b in ready if int(b.id) < oldest_kept]
    finished = [b for b in builds if b.state in (ImageBuildState.READY, ImageBuildState.FAILED)]
    last = finished[-1] if finished else None
    failed = [b for b in builds if b.state == ImageBuildState.FAILED and b is not last]
    return sorted(old + failed, key=lambda b: int(b.id))


def delete_build(builder: ImageBuilder, build: ImageBuild) -> bool:
    """Remove a ``delete`` build of this builder: uploads, files, node. False if not now."""
    store = builder.store
    for provider in store.providers(build.image, build.id):
        lock = paths_nodepool.provider_upload_lock(build.image, build.id, provider)
        held = store.lock_upload(build, provider, builder.builder_id)
        if held is None:
            log.info("image %s: build %s: %s is busy, deleting later", build.image, build.id, lock)
            return False
        with held:
            for upload in store.uploads(build.image, build.id, provider):
                remove_upload(builder, upload)
    builder.remove_files(build)
    store.remove_build(build)
    log.info("image %s: build %s deleted", build.image, build.id)
    return True
