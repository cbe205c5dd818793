"""Whether a build's sources hold its repo state (workers/executor/speculation.py).

Asked on every build: a source whose commits are loose or whole in a pack
answers in-process; anything else is asked of git, which stays the judge.
"""

from __future__ import annotations

import subprocess
from typing import Any

import pytest

from tests.executor.helpers import Repo, git, make_spec
from workers.executor import speculation


@pytest.fixture
def git_processes(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The argv of every process the module starts (they still run)."""
    started: list[list[str]] = []
    real = subprocess.run

    def counting(argv: list[str], *args: Any, **kwargs: Any) -> Any:
        started.append(list(argv))
        return real(argv, *args, **kwargs)

    monkeypatch.setattr(speculation.subprocess, "run", counting)
    return started


def test_a_packed_source_is_answered_without_git(
    repo: Repo, git_processes: list[list[str]]
) -> None:
    repo.write("a.txt", "a")
    commit = repo.commit()
    git(repo.path, "repack", "-a", "-d", "-q")
    git(repo.path, "prune-packed")
    git_processes.clear()  # (the module's subprocess is everyone's: count from here)
    assert speculation.missing_sources(make_spec(repo, commit)) == []
    assert git_processes == []


def test_a_commit_the_source_lacks_is_missing(repo: Repo, git_processes: list[list[str]]) -> None:
    repo.write("a.txt", "a")
    repo.commit()
    git(repo.path, "repack", "-a", "-d", "-q")
    spec = make_spec(repo, "1" * 40)
    git_processes.clear()
    assert speculation.missing_sources(spec) == ["org/project"]
    assert len(git_processes) == 1  # not found in-process: git decides


def test_a_tree_is_no_commit(repo: Repo) -> None:
    repo.write("a.txt", "a")
    repo.commit()
    git(repo.path, "repack", "-a", "-d", "-q")
    tree = git(repo.path, "rev-parse", "HEAD^{tree}")
    assert speculation.missing_sources(make_spec(repo, tree)) == ["org/project"]
