"""The GitHub client against the fake GitHub: token and App auth, rate limits waited out."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from scheduler.drivers.github.api import GitHubApi, GitHubError
from scheduler.settings import ConnectionSettings
from tests.e2e.system import Repos
from tests.fixtures.fake_github import TOKEN, FakeGitHub


@pytest.fixture
def forge(tmp_path: Path) -> Iterator[FakeGitHub]:
    repos = Repos(tmp_path / "repos")
    base = repos.commit("org/app", "main", {"a.txt": "a\n"})
    repos.commit("org/app", "fix", {"b.txt": "b\n"}, base=base)
    with FakeGitHub(repos, "", "secret") as found:
        yield found


def connection(forge: FakeGitHub, **options: str) -> ConnectionSettings:
    return ConnectionSettings("github", "github", "", {"api_url": forge.url, **options})


def add_pull(forge: FakeGitHub) -> None:
    from tests.fixtures.fake_github import Pull

    pull = Pull("org/app", 1, "fix", "main", "Fix")
    forge.pulls[("org/app", 1)] = pull
    head = forge.repos.git("org/app", "rev-parse", "fix")
    forge.repos.git("org/app", "update-ref", "refs/pull/1/head", head)


def test_a_token_reads_and_writes(forge: FakeGitHub) -> None:
    add_pull(forge)
    api = GitHubApi(connection(forge, api_token=TOKEN))
    assert api.pull("org/app", 1)["base"]["ref"] == "main"
    api.set_status("org/app", "a" * 40, "pending", context="t/check", description="running")
    assert forge.statuses[0]["state"] == "pending"
    with pytest.raises(GitHubError) as missing:
        api.pull("org/app", 9)
    assert missing.value.status == 404
    with pytest.raises(GitHubError) as refused:
        GitHubApi(connection(forge, api_token="wrong")).pull("org/app", 1)
    assert refused.value.status == 401


def test_a_github_app_gets_installation_tokens(forge: FakeGitHub, tmp_path: Path) -> None:
    add_pull(forge)
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = tmp_path / "app.pem"
    pem.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    forge.app_public_key = (
        key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )
    api = GitHubApi(connection(forge, app_id="7", app_key=str(pem)))
    assert api.pull("org/app", 1)["number"] == 1
    assert api.reviews("org/app", 1) == []
    assert forge.installation_tokens == ["installation-0"]  # fetched once, then reused


def test_rate_limits_are_waited_out(forge: FakeGitHub) -> None:
    add_pull(forge)
    waits: list[float] = []
    api = GitHubApi(connection(forge, api_token=TOKEN), sleep=waits.append)
    forge.rate_limited = 1
    assert api.pull("org/app", 1)["number"] == 1
    assert waits == [0.0]  # the reset time had passed: no real wait
    forge.rate_limited = 2
    with pytest.raises(GitHubError) as limited:
        api.pull("org/app", 1)
    assert limited.value.status == 403
