"""The ``images:`` section of sluice.yaml: the documented example and errors that name the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from scheduler.errors import SettingsError
from scheduler.settings.load import parse_settings

EXAMPLE = """\
images:
  check_interval: 5
  build_dir: builds
  providers:
    local:
      driver: local
      image_dir: /srv/images
  diskimages:
    - name: base
      script: images/build-base.sh
      format: tar
      rebuild_interval: 86400
      rebuild_jitter: 600
      keep: 3
      timeout: 1800
      providers: [local]
    - name: small
      script: /opt/small.sh
"""


def test_the_documented_example(tmp_path: Path) -> None:
    images = parse_settings(EXAMPLE, "sluice.yaml", tmp_path).images
    assert images.check_interval == 5.0
    assert images.build_dir == tmp_path / "builds"
    assert images.builder_id is None
    assert images.providers["local"].image_dir == Path("/srv/images")
    base = images.diskimages["base"]
    assert base.script == tmp_path / "images" / "build-base.sh"
    assert (base.format, base.keep, base.timeout, base.providers) == ("tar", 3, 1800.0, ("local",))
    assert (base.rebuild_interval, base.rebuild_jitter) == (86400.0, 600.0)
    small = images.diskimages["small"]
    assert (small.format, small.keep, small.providers, small.rebuild_interval) == (
        "directory",
        2,
        (),
        86400.0,
    )


def test_no_section_means_no_images(tmp_path: Path) -> None:
    images = parse_settings("", "sluice.yaml", tmp_path).images
    assert images.diskimages == {} and images.providers == {}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (("keep: 3", "keep: 0"), "sluice.yaml:14: images.diskimages[0].keep: must be at least 1"),
        (("format: tar", "format: qcow2"), "images.diskimages[0].format: expected one of"),
        (("providers: [local]", "providers: [cloud]"), "unknown provider 'cloud'"),
        (("driver: local", "driver: openstack"), "images.providers.local.driver: expected"),
        (
            ("rebuild_jitter: 600", "rebuild_jiter: 600"),
            "images.diskimages[0].rebuild_jiter: unknown",
        ),
        (("check_interval: 5", "check_interval: 0"), "images.check_interval: must be positive"),
        (("timeout: 1800", "timeout: soon"), "images.diskimages[0].timeout: expected a number"),
        (("- name: small", "- name: base"), "image 'base' is named twice"),
        (
            ("    - name: small\n      script: /opt/small.sh\n", "    - name: small\n"),
            "script: required",
        ),
        (("image_dir: /srv/images", "image_dir: ''"), "images.providers.local.image_dir: required"),
    ],
)
def test_errors_name_the_key(tmp_path: Path, change: tuple[str, str], message: str) -> None:
    text = EXAMPLE.replace(*change)
    assert text != EXAMPLE
    with pytest.raises(SettingsError, match=None) as caught:
        parse_settings(text, "sluice.yaml", tmp_path)
    assert message in str(caught.value)
