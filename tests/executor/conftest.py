"""Fixtures of the executor tests: git without user config, a state dir, options."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.executor.helpers import Repo
from workers.executor import RunnerOptions, treecheckout, workspace


@pytest.fixture(autouse=True)
def git_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """git that needs no user config and reads none."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.delenv("GIT_CONFIG_GLOBAL", raising=False)
    for kind in ("AUTHOR", "COMMITTER"):
        monkeypatch.setenv(f"GIT_{kind}_NAME", "Sluice Test")
        monkeypatch.setenv(f"GIT_{kind}_EMAIL", "test@sluice.invalid")


@pytest.fixture
def options(tmp_path: Path) -> RunnerOptions:
    state = tmp_path / "state"
    state.mkdir()
    return RunnerOptions(state_dir=state, poll_interval=0.1, kill_grace=0.5)


@pytest.fixture
def repo(tmp_path: Path) -> Repo:
    return Repo.create(tmp_path / "repos" / "project")


@pytest.fixture
def fast_path(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """What each in-process checkout of the workspace answered (False: git checked out)."""
    answers: list[bool] = []
    real = treecheckout.checkout_commit

    def spy(objects: Path, dest: Path, commit: str, reuse: bool = False) -> bool:
        answers.append(real(objects, dest, commit, reuse))
        return answers[-1]

    monkeypatch.setattr(workspace, "checkout_commit", spy)
    return answers
