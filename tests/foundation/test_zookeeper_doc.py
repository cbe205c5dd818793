"""docs/zookeeper.md lists every module of the kazoo layer and of the stores, and no other."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "zookeeper.md").read_text()


def _listed(heading: str) -> set[str]:
    section = DOC[DOC.index(heading) :]
    section = section[: section.index("\n### ", 1)]
    return set(re.findall(r"^\| `([a-z_]+)\.py` \|", section, re.MULTILINE))


@pytest.mark.parametrize(
    ("heading", "package"),
    [
        ("### The kazoo layer: `scheduler/zk/`", "scheduler/zk"),
        ("### The record stores: `scheduler/stores/`", "scheduler/stores"),
    ],
)
def test_each_module_has_its_row(heading: str, package: str) -> None:
    modules = {p.stem for p in (ROOT / package).glob("*.py")} - {"__init__"}
    assert _listed(heading) == modules
