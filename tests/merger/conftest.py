"""Fixtures of the merger tests: remotes under a git connection, a repo cache."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from scheduler.settings.sections import ConnectionSettings
from scheduler.wire.merger import MergeMode
from tests.merger.gitrepos import Remotes
from workers.merger.cache import RepoCache
from workers.merger.gitcmd import Git
from workers.merger.modes import Applier
from workers.merger.parking import close_parked


@pytest.fixture(autouse=True)
def no_parked_processes() -> Iterator[None]:
    """Each test starts and ends with no git process parked (workers/merger/parking.py)."""
    close_parked()
    yield
    close_parked()


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


@pytest.fixture
def git_processes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The git subcommand of every git process the merger starts, in order."""
    started: list[str] = []
    real_run, real_popen = Git.run, Git.popen

    def run(self: Git, args: Any, *rest: Any, **kw: Any) -> Any:
        started.append(args[0])
        return real_run(self, args, *rest, **kw)

    def popen(self: Git, args: Any, *rest: Any, **kw: Any) -> Any:
        started.append(args[0])
        return real_popen(self, args, *rest, **kw)

    monkeypatch.setattr(Git, "run", run)
    monkeypatch.setattr(Git, "popen", popen)
    return started
