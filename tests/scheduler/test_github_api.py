"""The GitHub client against the fake GitHub: token and App auth, rate limits waited out."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from scheduler.drivers.github.api import GitHubApi, GitHubError
from scheduler.settings.sections import ConnectionSettings
from tests.fixtures.fake_github import TOKEN, FakeGitHub, github_with_a_pull


@pytest.fixture
def forge(tmp_path: Path) -> Iterator[FakeGitHub]:
    with github_with_a_pull(tmp_path / "repos") as found:
        yield found


def connection(forge: FakeGitHub, **options: str) -> ConnectionSettings:
    return ConnectionSettings("github", "github", "", {"api_url": forge.url, **options})


def test_a_token_reads_and_writes(forge: FakeGitHub) -> None:
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
    pem = forge.make_app(tmp_path / "app.pem")
    api = GitHubApi(connection(forge, app_id="7", app_key=str(pem)))
    assert api.pull("org/app", 1)["number"] == 1
    assert api.reviews("org/app", 1) == []
    assert forge.installation_tokens == ["installation-0"]  # fetched once, then reused


def test_rate_limits_are_waited_out(forge: FakeGitHub) -> None:
    waits: list[float] = []
    api = GitHubApi(connection(forge, api_token=TOKEN), sleep=waits.append)
    forge.rate_limited = 1
    assert api.pull("org/app", 1)["number"] == 1
    assert waits == [0.0]  # the reset time had passed: no real wait
    forge.rate_limited = 2
    with pytest.raises(GitHubError) as limited:
        api.pull("org/app", 1)
    assert limited.value.status == 403


def test_secondary_rate_limits_and_timeouts(forge: FakeGitHub) -> None:
    waits: list[float] = []
    api = GitHubApi(connection(forge, api_token=TOKEN, api_timeout="0.5"), sleep=waits.append)
    forge.fault("POST", "/statuses/", 403, headers={"Retry-After": "7"})
    api.set_status("org/app", "a" * 40, "pending", context="t/check", description="running")
    assert waits == [7.0] and len(forge.statuses) == 1  # waited as told, then posted
    forge.fault(
        "GET", "/reviews$", 429, headers={"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "0"}
    )
    assert api.reviews("org/app", 1) == []
    forge.fault("POST", "/comments$", delay=1.0)  # GitHub answers after the client gave up
    with pytest.raises(GitHubError) as late:
        api.comment("org/app", 1, "hello")
    assert late.value.status == 0
    forge.fault("PUT", "/merge$", 502)
    with pytest.raises(GitHubError) as failed:
        api.merge("org/app", 1, forge.pulls[("org/app", 1)].sha(forge.repos))
    assert failed.value.status == 502 and forge.merges == []


def test_check_runs_refused_are_left_out_but_rate_limits_are_not_refusals(
    forge: FakeGitHub,
) -> None:
    api = GitHubApi(connection(forge, api_token=TOKEN), sleep=lambda _: None)
    forge.fault("POST", "/check-runs$", 403, times=2, headers={"Retry-After": "1"})
    with pytest.raises(GitHubError):  # a secondary rate limit, twice: an error, not a refusal
        api.set_check_run("org/app", "a" * 40, "success", name="t/check", summary="ok")
    api.set_check_run("org/app", "a" * 40, "success", name="t/check", summary="ok")  # 403: refused
    again = GitHubApi(connection(forge, api_token=TOKEN))  # another client, the same process
    again.set_check_run("org/app", "a" * 40, "success", name="t/check", summary="ok")
    assert forge.count("POST", "/check-runs$") == 3 and forge.check_runs == []


def test_a_heads_commits_are_read_once(forge: FakeGitHub) -> None:
    api = GitHubApi(connection(forge, api_token=TOKEN))
    head = forge.pulls[("org/app", 1)].sha(forge.repos)
    first = api.pull_commits("org/app", 1, head)
    assert first[-1][0] == head
    assert GitHubApi(connection(forge, api_token=TOKEN)).pull_commits("org/app", 1, head) == first
    assert forge.count("GET", "/pulls/1/commits$") == 1
    api.pull_commits("org/app", 1)  # no head named: read again
    assert forge.count("GET", "/pulls/1/commits$") == 2


def test_a_depends_on_naming_no_pull_request_is_no_dependency(forge: FakeGitHub) -> None:
    from scheduler.drivers.github import events

    api = GitHubApi(connection(forge, api_token=TOKEN))
    text = "Depends-On: https://github.com/org/app/pull/9\nDepends-On: https://github.com/org/gone/pull/1"
    assert events.needs_of(api, "org/app", 1, text) == []  # both 404: as in Zuul
    forge.fault("GET", "/pulls/9$", 502)
    with pytest.raises(GitHubError):  # GitHub failing is not GitHub saying no
        events.needs_of(api, "org/app", 1, text)
