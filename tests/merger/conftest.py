"""Fixtures of the merger tests: remotes under a git connection, a repo cache."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from scheduler.settings import ConnectionSettings
from scheduler.wire.merger import MergeMode
from tests.merger.gitrepos import Remotes
from workers.merger.cache import RepoCache
from workers.merger.modes import Applier


@pytest.fixture
def remotes(tmp_path: Path) -> Remotes:
    return Remotes(tmp_path / "remotes", tmp_path / "home")


@pytest.fixture
def connections(remotes: Remotes) -> dict[str, ConnectionSettings]:
    return {"git": ConnectionSettings(name="git", driver="git", baseurl=str(remotes.base))}


@pytest.fixture
def cache(tmp_path: Path, connections: dict[str, ConnectionSettings]) -> RepoCache:
    return RepoCache(tmp_path / "state", connections)


@pytest.fixture
def applied(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every commit the merger applies (merges, cherry-picks, ...), in order."""
    commits: list[str] = []
    real_apply = Applier.apply

    def counting_apply(self: Applier, mode: MergeMode, tip: str, commit: str, **kw: Any) -> str:
        commits.append(commit)
        return real_apply(self, mode, tip, commit, **kw)

    monkeypatch.setattr(Applier, "apply", counting_apply)
    return commits
