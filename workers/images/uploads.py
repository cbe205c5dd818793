"""Uploading builds to providers, and removing uploads.

An upload of build ``B`` of image ``I`` to provider ``P`` is made under
the upload lock ``.../builds/B/provider/P/images/lock`` by the builder that
has the build's files: it creates an ``uploading`` upload (a sequence
node), copies the artifact and sets ``ready`` with the external id, or
``failed``; both writes are fenced by the upload lock. An ``uploading``
upload seen under that lock was abandoned by a dead builder: its partial
copy and its node are removed before a new upload starts.

The **local** provider is a folder (``image_dir``): the artifact is copied
to ``<image_dir>/.<name>.partial`` and renamed to ``<image_dir>/<name>``
(``<image>-<build>-<upload>``, plus ``.tar.gz`` for an archive), so the
path a launcher gets as external id is always complete.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Protocol

from scheduler.settings.images import ImageProviderSettings, ImageSettings
from scheduler.stores.images import ImageBuild, ImageStore, ImageUpload, ImageUploadState

log = logging.getLogger(__name__)


class Uploader(Protocol):
    """What an upload needs of the builder that made the image (``ImageBuilder``)."""

    @property
    def builder_id(self) -> str: ...

    @property
    def images(self) -> ImageSettings: ...

    @property
    def store(self) -> ImageStore: ...

    def artifact(self, build: ImageBuild) -> Path: ...


class LocalImageProvider:
    """Uploads as folders (or archives) in ``image_dir`` on the builder's host."""

    def __init__(self, settings: ImageProviderSettings) -> None:
        self.settings = settings
        self.image_dir = settings.image_dir

    def target(self, upload: ImageUpload, artifact: Path) -> Path:
        suffix = ".tar.gz" if artifact.name.endswith(".tar.gz") else ""
        return self.image_dir / f"{upload.image}-{upload.build_id}-{upload.id}{suffix}"

    def upload(self, upload: ImageUpload, artifact: Path) -> str:
        """Copy ``artifact`` in; its final path is the external id."""
        target = self.target(upload, artifact)
        scratch = target.with_name(f".{target.name}.partial")
        self.image_dir.mkdir(parents=True, exist_ok=True)
        _remove(scratch)
        if artifact.is_dir():
            shutil.copytree(artifact, scratch, symlinks=True)
        else:
            shutil.copy2(artifact, scratch)
        scratch.rename(target)
        return str(target)

    def remove(self, upload: ImageUpload) -> None:
        """Remove the upload's copy and any partial one (only ever inside ``image_dir``)."""
        for suffix in ("", ".tar.gz"):
            name = f"{upload.image}-{upload.build_id}-{upload.id}{suffix}"
            _remove(self.image_dir / name)
            _remove(self.image_dir / f".{name}.partial")
        if upload.external_id:
            path = Path(upload.external_id)
            if path.parent == self.image_dir:
                _remove(path)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def provider(builder: Uploader, name: str) -> LocalImageProvider | None:
    settings = builder.images.providers.get(name)
    return LocalImageProvider(settings) if settings is not None else None


def upload_build(builder: Uploader, build: ImageBuild) -> list[ImageUpload]:
    """Upload ``build`` to every provider of its image that has no ready upload yet."""
    image = builder.images.image(build.image)
    if image is None:
        return []
    done = []
    for name in image.providers:
        upload = upload_to(builder, build, name)
        if upload is not None:
            done.append(upload)
    return done


def upload_to(builder: Uploader, build: ImageBuild, name: str) -> ImageUpload | None:
    """The build's ready upload to provider ``name``, made now if missing.

    None when another builder holds the upload lock, the provider is not
    configured, or the upload failed (recorded ``failed``).
    """
    target = provider(builder, name)
    if target is None:
        return None
    store = builder.store
    held = store.lock_upload(build, name, builder.builder_id)
    if held is None:
        return None
    with held:
        for upload in store.uploads(build.image, build.id, name):
            if upload.state == ImageUploadState.READY:
                return upload
            if upload.state == ImageUploadState.UPLOADING:  # abandoned: we hold its lock
                target.remove(upload)
                store.remove_upload(upload)
        upload = store.start_upload(held, build, name)
        try:
            external_id = target.upload(upload, builder.artifact(build))
        except OSError as exc:
            log.warning(
                "image %s: upload of build %s to %s failed: %s", build.image, build.id, name, exc
            )
            target.remove(upload)
            store.finish_upload(held, upload, ImageUploadState.FAILED)
            return None
        upload = store.finish_upload(held, upload, ImageUploadState.READY, external_id)
    log.info("image %s: build %s uploaded to %s as %s", build.image, build.id, name, external_id)
    return upload


def remove_upload(builder: Uploader, upload: ImageUpload) -> None:
    """Remove an upload's copy, then its node."""
    target = provider(builder, upload.provider)
    if target is not None:
        target.remove(upload)
    builder.store.remove_upload(upload)
