"""The merger fetches a private GitHub repository with the App's installation token.

The fake GitHub serves git's smart HTTP (``git http-backend``) and refuses
a private repository to a client without a token; the merger's git sends
``x-access-token:<token>`` as basic auth, from its environment only.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from scheduler.drivers.git.refs import RefError, list_refs
from scheduler.drivers.github.credentials import remote_env
from scheduler.drivers.merging import DriverForges
from scheduler.settings.sections import ConnectionSettings
from tests.fixtures.fake_github import FakeGitHub, github_with_a_pull
from workers.merger import forges
from workers.merger.cache import RepoCache
from workers.merger.errors import MergerError
from workers.merger.repo import Repo


@pytest.fixture(autouse=True)
def drivers() -> Iterator[None]:
    """The forge drivers in the merger, as the Celery app installs them."""
    before = forges.installed()
    forges.install(DriverForges())
    yield
    forges.install(before)


@pytest.fixture
def forge(tmp_path: Path) -> Iterator[FakeGitHub]:
    with github_with_a_pull(tmp_path / "repos") as found:
        found.private.add("org/app")
        yield found


def github(forge: FakeGitHub, tmp_path: Path, **options: object) -> ConnectionSettings:
    return ConnectionSettings("github", "github", forge.address, {"api_url": forge.url, **options})


def heads(repo: Repo) -> dict[str, str]:
    repo.fetch(["+refs/pull/*/head:refs/pull/*/head"])
    return repo.heads()


def test_a_private_repository_is_cloned_and_fetched_with_the_app_token(
    forge: FakeGitHub, tmp_path: Path
) -> None:
    pem = forge.make_app(tmp_path / "app.pem")
    connection = github(forge, tmp_path, app_id=7, app_key=str(pem))
    cache = RepoCache(tmp_path / "state", {"github": connection})
    found = cache.run("github", "org/app", heads)
    assert set(found) >= {"main", "fix"}
    assert any(p.endswith("/git-upload-pack") for _, p in forge.git_requests)
    # the token is nowhere in the cache's files, nor in this process's environment
    (token,) = forge.installation_tokens
    for folder, _, files in os.walk(cache.root):
        for name in files:
            assert token.encode() not in (Path(folder) / name).read_bytes()
    assert not any(token in value for value in os.environ.values())
    env = remote_env(connection, "org/app", {"GIT_CONFIG_COUNT": "1"})
    assert env["GIT_CONFIG_COUNT"] == "2"  # the environment's own entry kept
    assert env["GIT_CONFIG_KEY_1"] == f"http.{forge.address}/.extraHeader"


def test_without_a_token_github_refuses_git(forge: FakeGitHub, tmp_path: Path) -> None:
    cache = RepoCache(tmp_path / "state", {"github": github(forge, tmp_path)})
    with pytest.raises(MergerError, match="remote unreachable"):
        cache.run("github", "org/app", heads)
    assert ("GET", "/org/app/info/refs") in forge.git_requests
    forge.private.clear()  # a public repository needs none
    assert "main" in cache.run("github", "org/app", heads)


def test_only_https_remotes_get_the_token(tmp_path: Path) -> None:
    plain = ConnectionSettings("github", "github", "http://github.example", {"api_token": "t"})
    assert remote_env(plain, "org/app", {}) == {}
    secure = ConnectionSettings("github", "github", "https://github.example", {"api_token": "t"})
    assert remote_env(secure, "org/app", {})["GIT_CONFIG_VALUE_0"] == (
        "Authorization: Basic eC1hY2Nlc3MtdG9rZW46dA=="  # x-access-token:t
    )


def test_sluice_enqueue_lists_a_private_repository_s_refs_with_the_token(
    forge: FakeGitHub, tmp_path: Path
) -> None:
    """``sluice enqueue`` checks a ref with ``ls-remote`` before it enqueues: with the token."""
    pem = forge.make_app(tmp_path / "app.pem")
    with pytest.raises(RefError, match="repository unreachable"):
        list_refs(github(forge, tmp_path), "org/app")  # no credential: GitHub refuses
    refs = list_refs(github(forge, tmp_path, app_id=7, app_key=str(pem)), "org/app")
    assert {"refs/heads/main", "refs/heads/fix"} <= set(refs)
