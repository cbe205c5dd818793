"""A GitHub App's installation tokens: one per installation and process, renewed before expiry."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from scheduler.drivers.github.api import GitHubApi, GitHubError, renew_time, repo_path
from scheduler.settings.sections import ConnectionSettings
from tests.fixtures.fake_github import FakeGitHub, github_with_a_pull


@pytest.fixture
def forge(tmp_path: Path) -> Iterator[FakeGitHub]:
    with github_with_a_pull(tmp_path / "repos") as found:
        yield found


def app(forge: FakeGitHub, tmp_path: Path, name: str = "github") -> ConnectionSettings:
    pem = forge.make_app(tmp_path / "app.pem")
    return ConnectionSettings(
        name, "github", "", {"api_url": forge.url, "app_id": 7, "app_key": str(pem)}
    )


def test_every_client_of_a_connection_shares_its_tokens(forge: FakeGitHub, tmp_path: Path) -> None:
    connection = app(forge, tmp_path)
    for _ in range(3):  # a new client each time, as forge_api() makes them
        assert GitHubApi(connection).pull("org/app", 1)["number"] == 1
    assert forge.installation_tokens == ["installation-0"]
    assert forge.count("GET", "/installation$") == 1
    other = app(forge, tmp_path, name="other")  # another connection: tokens of its own
    GitHubApi(other).reviews("org/app", 1)
    assert len(forge.installation_tokens) == 2


def test_a_token_is_renewed_before_it_expires(forge: FakeGitHub, tmp_path: Path) -> None:
    forge.token_lifetime = 2.0  # renewed halfway when it lives less than ten minutes
    api = GitHubApi(app(forge, tmp_path))
    api.pull("org/app", 1)
    api.pull("org/app", 1)
    assert len(forge.installation_tokens) == 1
    time.sleep(1.1)
    api.pull("org/app", 1)
    assert len(forge.installation_tokens) == 2
    assert forge.unauthorized == 0  # never sent an expired token


def test_a_token_github_refuses_is_fetched_again_once(forge: FakeGitHub, tmp_path: Path) -> None:
    api = GitHubApi(app(forge, tmp_path))
    api.pull("org/app", 1)
    forge.token_expiry["installation-0"] = 0  # revoked on GitHub's side
    assert api.pull("org/app", 1)["number"] == 1
    assert forge.installation_tokens == ["installation-0", "installation-1"]
    assert forge.unauthorized == 1


def test_renewal_is_five_minutes_before_expires_at() -> None:
    now = 1_900_000_000.0
    assert renew_time({"expires_at": "2030-03-17T18:46:40Z"}, now) == now + 3600 - 300
    assert renew_time({}, now) == now + 3600 - 300  # no expires_at: GitHub's hour


@pytest.mark.parametrize("name", ["org/app x", "org/..", "org/app/x", "org\x00/app", "org", ""])
def test_names_github_cannot_have_are_refused(name: str) -> None:
    with pytest.raises(GitHubError):
        repo_path(name)
    assert repo_path("my-org/app.js_2") == "/repos/my-org/app.js_2"
