"""Fixtures of the merger tests: remotes under a git connection, a repo cache."""

from __future__ import annotations

from pathlib import Path

import pytest

from scheduler.settings import ConnectionSettings
from tests.merger.gitrepos import Remotes
from workers.merger.cache import RepoCache


@pytest.fixture
def remotes(tmp_path: Path) -> Remotes:
    return Remotes(tmp_path / "remotes", tmp_path / "home")


@pytest.fixture
def connections(remotes: Remotes) -> dict[str, ConnectionSettings]:
    return {"git": ConnectionSettings(name="git", driver="git", baseurl=str(remotes.base))}


@pytest.fixture
def cache(tmp_path: Path, connections: dict[str, ConnectionSettings]) -> RepoCache:
    return RepoCache(tmp_path / "state", connections)
