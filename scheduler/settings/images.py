"""The ``images:`` section of ``sluice.yaml``: disk images, their builders and providers.

Seed 004 (Nodepool's image builds in ZooKeeper). A builder worker (one that
consumes the ``builder`` queue) builds every image named here with its
script, keeps the newest ``keep`` builds and uploads each build to the
image's providers::

    images:
      check_interval: 10         # seconds between two looks of each builder
      build_dir: images          # where this builder keeps its builds
      providers:
        local:
          driver: local
          image_dir: /srv/sluice/images   # where uploads go (external id = path)
      diskimages:
        - name: base
          script: images/build-base.sh    # fills $SLUICE_IMAGE_ROOT
          format: directory               # or tar (a .tar.gz of the root)
          rebuild_interval: 86400         # 0: only when missing or requested
          rebuild_jitter: 3600            # spread over this many seconds
          keep: 2
          timeout: 3600
          retry_delay: 60                 # after a failed build
          providers: [local]

Every error names the file, line and key (:class:`SettingsReader`).
docs/nodes.md describes the builder.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scheduler.settings.reader import SettingsReader, resolve_path

PROVIDER_DRIVERS = ("local",)
IMAGE_FORMATS = ("directory", "tar")


@dataclass(frozen=True)
class ImageProviderSettings:
    """Where uploads of images go; ``local``: a folder on the builder's host."""

    name: str
    driver: str = "local"
    image_dir: Path = Path("images")


@dataclass(frozen=True)
class DiskImageSettings:
    """One image: how it is built, how often rebuilt, how many builds kept, where uploaded."""

    name: str
    script: Path
    format: str = "directory"
    rebuild_interval: float = 86400.0
    rebuild_jitter: float = 3600.0
    keep: int = 2
    timeout: float = 3600.0
    retry_delay: float = 60.0
    providers: tuple[str, ...] = ()


@dataclass(frozen=True)
class ImageSettings:
    check_interval: float = 10.0
    # None: ``<state_dir>/images``
    build_dir: Path | None = None
    # None: made once and kept in ``<build_dir>/builder-id``
    builder_id: str | None = None
    providers: Mapping[str, ImageProviderSettings] = field(default_factory=dict)
    diskimages: Mapping[str, DiskImageSettings] = field(default_factory=dict)

    def image(self, name: str) -> DiskImageSettings | None:
        return self.diskimages.get(name)


def _positive(reader: SettingsReader, key: str, default: float, *, zero: bool = False) -> float:
    value = float(reader.get(key, float, default))
    if value < 0 or (value == 0 and not zero):
        raise reader.error(key, "must not be negative" if zero else "must be positive")
    return value


def _read_provider(reader: SettingsReader, name: str, base: Path) -> ImageProviderSettings:
    driver = reader.get("driver", str, "local")
    if driver not in PROVIDER_DRIVERS:
        raise reader.error(
            "driver", f"expected one of {', '.join(PROVIDER_DRIVERS)}, got {driver!r}"
        )
    image_dir = reader.get("image_dir", str, None)
    if not image_dir:
        raise reader.error("image_dir", "required: the folder uploads of this provider go to")
    reader.finish()
    return ImageProviderSettings(name, driver, resolve_path(image_dir, base))


def _read_diskimage(
    reader: SettingsReader, base: Path, providers: Mapping[str, ImageProviderSettings]
) -> DiskImageSettings:
    name = reader.get("name", str, "")
    if not name or "/" in name:
        raise reader.error("name", "required: a non-empty image name without '/'")
    script = reader.get("script", str, "")
    if not script:
        raise reader.error("script", "required: the program that fills $SLUICE_IMAGE_ROOT")
    image_format = reader.get("format", str, "directory")
    if image_format not in IMAGE_FORMATS:
        raise reader.error("format", f"expected one of {', '.join(IMAGE_FORMATS)}")
    keep = reader.get("keep", int, 2)
    if keep < 1:
        raise reader.error("keep", "must be at least 1")
    listed = reader.get("providers", list, [])
    for provider in listed:
        if not isinstance(provider, str) or provider not in providers:
            raise reader.error("providers", f"unknown provider {provider!r} (see images.providers)")
    image = DiskImageSettings(
        name=name,
        script=resolve_path(script, base),
        format=image_format,
        rebuild_interval=_positive(reader, "rebuild_interval", 86400.0, zero=True),
        rebuild_jitter=_positive(reader, "rebuild_jitter", 3600.0, zero=True),
        keep=keep,
        timeout=_positive(reader, "timeout", 3600.0),
        retry_delay=_positive(reader, "retry_delay", 60.0, zero=True),
        providers=tuple(listed),
    )
    reader.finish()
    return image


def read_images(reader: SettingsReader | None, base: Path) -> ImageSettings:
    """The ``images:`` section (``ImageSettings()`` when absent)."""
    if reader is None:
        return ImageSettings()
    check_interval = _positive(reader, "check_interval", 10.0)
    build_dir = reader.get("build_dir", str, None)
    builder_id = reader.get("builder_id", str, None)
    if builder_id is not None and (not builder_id or "/" in builder_id):
        raise reader.error("builder_id", "expected a non-empty name without '/'")
    providers: dict[str, ImageProviderSettings] = {}
    section = reader.sub("providers")
    if section is not None:
        for name in [k for k in section.data]:
            sub = section.sub(name)
            if sub is None:
                raise section.error(name, "expected a mapping")
            providers[name] = _read_provider(sub, name, base)
    diskimages: dict[str, DiskImageSettings] = {}
    listed: list[Any] = reader.get("diskimages", list, [])
    for index, entry in enumerate(listed):
        if not isinstance(entry, dict):
            raise reader.error("diskimages", f"entry {index}: expected a mapping")
        sub = SettingsReader(entry, reader.where, f"{reader.prefix}diskimages[{index}].")
        image = _read_diskimage(sub, base, providers)
        if image.name in diskimages:
            raise reader.error("diskimages", f"image {image.name!r} is named twice")
        diskimages[image.name] = image
    reader.finish()
    return ImageSettings(
        check_interval=check_interval,
        build_dir=resolve_path(build_dir, base) if build_dir else None,
        builder_id=builder_id,
        providers=providers,
        diskimages=diskimages,
    )
