"""The kombu and Celery whose message format Sluice writes by hand are the ones installed.

:mod:`scheduler.nudge.envelope` writes Celery's protocol-2 task message and
kombu's Redis envelope itself (the fast sends and the workers' task events),
so a kombu or Celery outside :data:`~scheduler.nudge.envelope.MESSAGE_FORMAT_OF`
may read those messages otherwise, or not at all. These tests fail before that
happens: when the installed releases leave the range, and when
``pyproject.toml`` lets an install leave it.
"""

from __future__ import annotations

import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from scheduler.nudge.envelope import MESSAGE_FORMAT_OF

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def _range(package: str) -> SpecifierSet:
    lowest, highest = MESSAGE_FORMAT_OF[package]
    return SpecifierSet(f">={lowest},<{highest}")


def _declared(package: str) -> SpecifierSet:
    dependencies = tomllib.loads(PYPROJECT.read_text())["project"]["dependencies"]
    found = [Requirement(line) for line in dependencies if Requirement(line).name == package]
    assert len(found) == 1, f"pyproject.toml declares {package} {len(found)} times"
    return found[0].specifier


def test_the_range_names_celery_and_kombu_only() -> None:
    assert set(MESSAGE_FORMAT_OF) == {"celery", "kombu"}
    for lowest, highest in MESSAGE_FORMAT_OF.values():
        assert Version(lowest) < Version(highest)


@pytest.mark.parametrize("package", sorted(MESSAGE_FORMAT_OF))
def test_the_installed_release_writes_the_format_the_envelope_writes(package: str) -> None:
    installed = metadata.version(package)
    assert installed in _range(package), (
        f"{package} {installed} is outside {_range(package)}, the releases whose message "
        "layout scheduler/nudge/envelope.py writes: check its protocol-2 message layout "
        "against the envelope before widening MESSAGE_FORMAT_OF"
    )


@pytest.mark.parametrize("package", sorted(MESSAGE_FORMAT_OF))
def test_pyproject_bounds_are_the_range(package: str) -> None:
    declared = _declared(package)
    bounds = {(spec.operator, spec.version) for spec in declared}
    lowest, highest = MESSAGE_FORMAT_OF[package]
    assert bounds == {(">=", lowest), ("<", highest)}, (
        f"pyproject.toml asks for {package}{declared}; the envelope writes the format of "
        f"{_range(package)} (scheduler/nudge/envelope.py: MESSAGE_FORMAT_OF)"
    )
