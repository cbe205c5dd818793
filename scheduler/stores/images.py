"""Image builds and uploads in ZooKeeper, as seed 004 (Nodepool) lays them out.

The tree (under the Sluice root)::

    /nodepool/image/<image>/request-build                      flag: build now
    /nodepool/image/<image>/builds/lock                        the build lock
    /nodepool/image/<image>/builds/<seq>                       builder, filename, state, state_time
    /nodepool/image/<image>/builds/<seq>/provider/<p>/images/lock    the upload lock
    /nodepool/image/<image>/builds/<seq>/provider/<p>/images/<seq>   external_id, state, state_time

Guarantees:

* One builder builds an image at a time: a build starts only under the
  build lock (:meth:`ImageStore.lock_builds`, a kazoo-style exclusive lock
  whose contender node is ephemeral), and the build's node is created, and
  the ``request-build`` flag lowered, in ONE transaction fenced by that
  lock (:meth:`ImageStore.start_build`). Every later write of a building
  build is fenced by the lock too, so a builder whose session expired can
  never mark its build ready after another builder took over.
* A builder that dies loses its lock with its session, and its build stays
  ``building``. A ``building`` build seen by someone who holds the build
  lock is therefore incomplete: its builder removes its files and its node
  when it finds it (``workers/images/cleanup.py``).
* Deleting is a state: :meth:`ImageStore.mark_delete` sets ``delete`` (a
  compare-and-set); the build's own builder removes files, uploads and
  node. Readers ignore every build that is not ``ready``.
* :meth:`ImageStore.latest_upload` is the launcher's read: the highest
  ready upload of the highest ready build for a provider.

Build and upload ids are sequence numbers as ZooKeeper makes them (the
parent's child version, ten digits), taken by the lock holder, so they
only grow and sort as text and as numbers. On SUSPENDED or LOST the calls raise the layer's errors
(:mod:`scheduler.zk.errors`); a fenced write refused after a lost session
changes nothing, and every step here can be repeated.
"""

from __future__ import annotations

import contextlib
import enum
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from kazoo.exceptions import BadVersionError, NoNodeError

from scheduler.zk import flags, locks, paths, paths_nodepool, stored
from scheduler.zk.client import ZooKeeperClient
from scheduler.zk.context import EXISTS, NO_NODE, OpFailedError
from scheduler.zk.errors import ConflictError, ZooKeeperError
from scheduler.zk.locks import HeldLock
from scheduler.zk.retry import CONFLICT


class ImageBuildState(enum.StrEnum):
    BUILDING = "building"
    READY = "ready"
    FAILED = "failed"
    DELETE = "delete"


class ImageUploadState(enum.StrEnum):
    UPLOADING = "uploading"
    READY = "ready"
    FAILED = "failed"
    DELETE = "delete"


class ImageStoreError(ZooKeeperError):
    """An image build or upload that does not exist, or cannot change as asked."""


@dataclass(frozen=True)
class ImageBuild:
    """One build of an image (``builds/<id>``)."""

    image: str
    id: str
    builder: str
    filename: str
    state: str
    state_time: float
    format: str = "directory"
    started: float = 0.0
    version: int = field(default=-1, compare=False)

    @property
    def path(self) -> str:
        return paths_nodepool.image_build(self.image, self.id)

    def to_dict(self) -> dict[str, Any]:
        return {
            "builder": self.builder,
            "filename": self.filename,
            "state": self.state,
            "state_time": self.state_time,
            "format": self.format,
            "started": self.started,
        }

    @classmethod
    def from_dict(
        cls, image: str, build_id: str, data: Mapping[str, Any], version: int = -1
    ) -> ImageBuild:
        return cls(
            image=image,
            id=build_id,
            builder=str(data.get("builder", "")),
            filename=str(data.get("filename", "")),
            state=str(data.get("state", ImageBuildState.BUILDING)),
            state_time=float(data.get("state_time", 0.0)),
            format=str(data.get("format", "directory")),
            started=float(data.get("started", 0.0)),
            version=version,
        )


@dataclass(frozen=True)
class ImageUpload:
    """One upload of a build to a provider (``provider/<p>/images/<id>``)."""

    image: str
    build_id: str
    provider: str
    id: str
    external_id: str
    state: str
    state_time: float
    version: int = field(default=-1, compare=False)

    @property
    def path(self) -> str:
        return paths_nodepool.provider_upload(self.image, self.build_id, self.provider, self.id)

    def to_dict(self) -> dict[str, Any]:
        return {"external_id": self.external_id, "state": self.state, "state_time": self.state_time}

    @classmethod
    def from_dict(
        cls,
        where: tuple[str, str, str, str],
        data: Mapping[str, Any],
        version: int = -1,
    ) -> ImageUpload:
        image, build_id, provider, upload_id = where
        return cls(
            image=image,
            build_id=build_id,
            provider=provider,
            id=upload_id,
            external_id=str(data.get("external_id", "")),
            state=str(data.get("state", ImageUploadState.UPLOADING)),
            state_time=float(data.get("state_time", 0.0)),
            version=version,
        )


def _sequence_ids(children: list[str]) -> list[str]:
    """Sequence node names among ``children`` (not ``lock``), in order."""
    return sorted((c for c in children if c.isdigit()), key=int)


class ImageStore:
    """Reads and writes of ``/nodepool/image``; see the module docstring."""

    def __init__(self, client: ZooKeeperClient) -> None:
        self.client = client

    # ------------------------------------------------------------ reading

    def images(self) -> list[str]:
        """Images that have a node (built, building or requested)."""
        try:
            return sorted(
                paths.unsegment(c) for c in self.client.get_children(paths_nodepool.images_root())
            )
        except NoNodeError:
            return []

    def builds(self, image: str) -> list[ImageBuild]:
        """Every build of ``image``, oldest first."""
        try:
            ids = _sequence_ids(self.client.get_children(paths_nodepool.image_builds(image)))
        except NoNodeError:
            return []
        wanted = {i: paths_nodepool.image_build(image, i) for i in ids}
        return [
            ImageBuild.from_dict(image, build_id, data, version)
            for build_id, data, version in stored.decode_each(self.client, wanted)
        ]

    def build(self, image: str, build_id: str) -> ImageBuild | None:
        path = paths_nodepool.image_build(image, build_id)
        try:
            raw, stat = self.client.get(path)
        except NoNodeError:
            return None
        return ImageBuild.from_dict(image, build_id, stored.decode(raw, path), int(stat.version))

    def providers(self, image: str, build_id: str) -> list[str]:
        """Providers the build has an ``images/`` node for."""
        try:
            names = self.client.get_children(paths_nodepool.image_build_providers(image, build_id))
        except NoNodeError:
            return []
        return sorted(paths.unsegment(n) for n in names)

    def uploads(self, image: str, build_id: str, provider: str) -> list[ImageUpload]:
        """Uploads of the build to ``provider``, oldest first."""
        parent = paths_nodepool.provider_uploads(image, build_id, provider)
        try:
            ids = _sequence_ids(self.client.get_children(parent))
        except NoNodeError:
            return []
        wanted = {i: paths_nodepool.provider_upload(image, build_id, provider, i) for i in ids}
        return [
            ImageUpload.from_dict((image, build_id, provider, upload_id), data, version)
            for upload_id, data, version in stored.decode_each(self.client, wanted)
        ]

    def all_uploads(self, build: ImageBuild) -> list[ImageUpload]:
        return [
            u
            for provider in self.providers(build.image, build.id)
            for u in self.uploads(build.image, build.id, provider)
        ]

    def latest_upload(self, image: str, provider: str) -> ImageUpload | None:
        """The highest ready upload to ``provider`` of the highest ready build of ``image``.

        What a launcher boots a node from: its ``external_id`` names the
        image in the provider (for the local provider, the artifact's path).
        None when no ready build has a ready upload there.
        """
        for build in reversed(self.builds(image)):
            if build.state != ImageBuildState.READY:
                continue
            for upload in reversed(self.uploads(image, build.id, provider)):
                if upload.state == ImageUploadState.READY:
                    return upload
        return None

    # ------------------------------------------------------------ requests and the lock

    def request_build(self, image: str) -> None:
        """Raise ``request-build``: the next builder that looks builds ``image``."""
        flags.raise_flag(self.client, paths_nodepool.image_request_build(image))

    def build_requested(self, image: str) -> bool:
        return flags.is_raised(self.client, paths_nodepool.image_request_build(image))

    def lock_builds(self, image: str, builder: str, *, timeout: float = 0.0) -> HeldLock | None:
        """Take ``image``'s build lock (None when another builder holds it)."""
        return locks.acquire(
            self.client,
            paths_nodepool.image_build_lock(image),
            identifier=builder,
            timeout=timeout,
            blocking=timeout > 0,
        )

    def build_lock_holders(self, image: str) -> list[str]:
        """Builders holding or waiting for ``image``'s build lock (empty: nobody builds it)."""
        return locks.contenders(self.client, paths_nodepool.image_build_lock(image))

    # ------------------------------------------------------------ the build lifecycle

    def start_build(
        self, held: HeldLock, image: str, builder: str, image_format: str = "directory"
    ) -> ImageBuild:
        """Create a ``building`` build under the held build lock and lower ``request-build``.

        One transaction fenced by the lock. The id is the one ZooKeeper
        would give a sequence node there (the parent's child version, ten
        digits): only the lock holder creates builds, so it is unique and
        grows, and it is known before the create, so the file name
        (``<image>-<id>``) goes into the same write. (kazoo's transactions
        cannot create a sequence node directly under a parent: they strip
        the trailing ``/``.)
        """
        now = time.time()
        draft = ImageBuild(image, "", builder, "", ImageBuildState.BUILDING, now, image_format, now)
        flag = paths_nodepool.image_request_build(image)
        for _ in CONFLICT.tries():
            build_id = self._next_id(paths_nodepool.image_builds(image))
            txn = held.context.transaction()
            build = replace(draft, id=build_id, filename=f"{image}-{build_id}")
            txn.create(build.path, stored.encode(build.to_dict()))
            if self.client.exists(flag) is not None:
                txn.delete(flag)
            try:
                txn.commit()
                break
            except OpFailedError as exc:
                if exc.reason not in (NO_NODE, EXISTS) or exc.path not in (flag, build.path):
                    raise
                continue  # the flag went meanwhile, or the id was taken: again
        else:
            raise ConflictError(f"image {image}: could not start a build")
        return replace(build, version=0)

    def finish_build(self, held: HeldLock, build: ImageBuild, state: str) -> ImageBuild:
        """Set a build's outcome (``ready`` or ``failed``), fenced by the build lock.

        Fails with :class:`ImageStoreError` when the build was changed
        meanwhile (an operator marked it ``delete``).
        """
        return self._write(held, replace(build, state=state, state_time=time.time()))

    def _next_id(self, parent: str) -> str:
        """The sequence number ZooKeeper would append to a new child of ``parent``."""
        stat = self.client.exists(parent)
        if stat is None:
            self.client.ensure_path(parent)
            stat = self.client.exists(parent)
        return f"{int(stat.cversion):010d}"

    def _write(self, held: HeldLock, build: ImageBuild) -> ImageBuild:
        txn = held.context.transaction()
        txn.set(build.path, stored.encode(build.to_dict()), build.version)
        try:
            results = txn.commit()
        except OpFailedError as exc:
            raise ImageStoreError(f"build {build.image}/{build.id} changed: {exc.reason}") from None
        return replace(build, version=int(results[-1].version))

    def mark_delete(self, image: str, build_id: str) -> ImageBuild:
        """Set the build's state to ``delete``: its builder removes it (the seed's deletion)."""
        for _ in CONFLICT.tries():
            build = self.build(image, build_id)
            if build is None:
                raise ImageStoreError(f"image {image} has no build {build_id}")
            if build.state == ImageBuildState.DELETE:
                return build
            updated = replace(build, state=ImageBuildState.DELETE, state_time=time.time())
            try:
                stat = self.client.set(
                    build.path, stored.encode(updated.to_dict()), version=build.version
                )
            except (BadVersionError, NoNodeError):
                continue
            return replace(updated, version=int(stat.version))
        raise ConflictError(f"image {image}: too much contention deleting build {build_id}")

    def remove_build(self, build: ImageBuild) -> None:
        """Delete the build's node and everything below it (after its files are gone)."""
        with contextlib.suppress(NoNodeError):
            self.client.delete_tree(build.path)

    # ------------------------------------------------------------ uploads

    def lock_upload(self, build: ImageBuild, provider: str, builder: str) -> HeldLock | None:
        path = paths_nodepool.provider_upload_lock(build.image, build.id, provider)
        return locks.acquire(self.client, path, identifier=builder, blocking=False)

    def upload_lock_holders(self, build: ImageBuild, provider: str) -> list[str]:
        """Builders holding or waiting for the upload lock (empty: no upload in progress)."""
        path = paths_nodepool.provider_upload_lock(build.image, build.id, provider)
        return locks.contenders(self.client, path)

    def start_upload(self, held: HeldLock, build: ImageBuild, provider: str) -> ImageUpload:
        """A new ``uploading`` upload of ``build`` to ``provider``, fenced by the upload lock."""
        now = time.time()
        draft = ImageUpload(
            build.image, build.id, provider, "", "", ImageUploadState.UPLOADING, now
        )
        for _ in CONFLICT.tries():
            upload_id = self._next_id(
                paths_nodepool.provider_uploads(build.image, build.id, provider)
            )
            upload = replace(draft, id=upload_id)
            txn = held.context.transaction()
            txn.create(upload.path, stored.encode(upload.to_dict()))
            try:
                txn.commit()
            except OpFailedError as exc:
                if exc.reason != EXISTS or exc.path != upload.path:
                    raise
                continue
            return replace(upload, version=0)
        raise ConflictError(f"{build.image}/{build.id}: could not start an upload to {provider}")

    def finish_upload(
        self, held: HeldLock, upload: ImageUpload, state: str, external_id: str = ""
    ) -> ImageUpload:
        updated = replace(upload, state=state, external_id=external_id, state_time=time.time())
        txn = held.context.transaction()
        txn.set(upload.path, stored.encode(updated.to_dict()), upload.version)
        try:
            results = txn.commit()
        except OpFailedError as exc:
            raise ImageStoreError(f"upload {upload.path} changed: {exc.reason}") from None
        return replace(updated, version=int(results[-1].version))

    def remove_upload(self, upload: ImageUpload) -> None:
        with contextlib.suppress(NoNodeError):
            self.client.delete(upload.path)
