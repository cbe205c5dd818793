"""The merge queue's last step on a forge, against the fake GitHub and GitLab over HTTP.

The forge hears the gate's success before it merges (a protected branch
merges only then); what it answers a merge decides the item's fate: merged,
the head moved (409), not mergeable with its own words (405, 422), or a
forge that fails (5xx, a timeout) tried again.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from scheduler.drivers import merging
from scheduler.drivers.merging import NOT_MERGEABLE, forge_merge
from scheduler.settings.sections import ConnectionSettings
from scheduler.wire.merger import NOT_FAST_FORWARD, ForgeReport, PushJob, Status
from tests.e2e.system import Repos
from tests.fixtures.fake_github import TOKEN, FakeGitHub, Pull
from tests.fixtures.fake_gitlab import TOKEN as GITLAB_TOKEN
from tests.fixtures.fake_gitlab import FakeGitLab

REPORT = ForgeReport(
    context="demo/gate",
    text="Build succeeded (demo/gate).\n\n- unit: SUCCESS",
    status="success",
    comment=True,
    url="https://sluice.example/t/demo/buildset/1",
)


@pytest.fixture
def repos(tmp_path: Path) -> Repos:
    found = Repos(tmp_path / "repos")
    base = found.commit("org/app", "main", {"a.txt": "a\n"})
    found.commit("org/app", "fix", {"b.txt": "b\n"}, base=base)
    found.git("org/app", "checkout", "-q", "--detach")
    return found


@pytest.fixture
def github(repos: Repos) -> Iterator[tuple[FakeGitHub, Pull]]:
    with FakeGitHub(repos, "", "secret") as forge:
        pull = Pull("org/app", 1, "fix", "main", "Fix")
        forge.pulls[("org/app", 1)] = pull
        repos.git(
            "org/app", "update-ref", "refs/pull/1/head", repos.git("org/app", "rev-parse", "fix")
        )
        yield forge, pull


def job(sha: str, report: ForgeReport | None = REPORT, ref: str = "refs/pull/1/head") -> PushJob:
    return PushJob(
        "j1", "github", "org/app", "main", sha, change_ref=ref, change_commit=sha, report=report
    )


def connection(forge: FakeGitHub | FakeGitLab, driver: str = "github") -> ConnectionSettings:
    options = {"api_url": forge.url, "api_token": TOKEN if driver == "github" else GITLAB_TOKEN}
    return ConnectionSettings(driver, driver, "", options)


def test_the_status_and_comment_come_before_the_merge_of_a_protected_branch(
    github: tuple[FakeGitHub, Pull],
) -> None:
    forge, pull = github
    forge.protect("org/app", "main", ["demo/gate"])
    sha = pull.sha(forge.repos)
    result = forge_merge(job(sha), connection(forge))
    assert result.status is Status.OK, result.failure
    assert [m["number"] for m in forge.merges] == [1]
    order = [(m, p.rsplit("/", 1)[-1]) for m, p in forge.calls if m in ("POST", "PUT")]
    assert order == [("POST", sha), ("POST", "comments"), ("PUT", "merge")]
    (status,) = forge.statuses
    assert status["target_url"] == REPORT.url and status["context"] == "demo/gate"


def test_without_the_report_a_protected_branch_refuses_with_its_words(
    github: tuple[FakeGitHub, Pull],
) -> None:
    forge, pull = github
    forge.protect("org/app", "main", ["demo/gate"])
    result = forge_merge(job(pull.sha(forge.repos), report=None), connection(forge))
    assert result.status is Status.FAILED and result.failure is not None
    assert result.failure.kind == NOT_MERGEABLE
    assert 'Required status check "demo/gate" is expected.' in result.failure.message
    assert not forge.merges


@pytest.mark.parametrize(
    ("status", "kind", "words"),
    [
        (409, NOT_FAST_FORWARD, "the head moved"),
        (405, NOT_MERGEABLE, "will not merge it"),
        (422, NOT_MERGEABLE, "will not merge it"),
    ],
)
def test_what_a_refused_merge_means(
    github: tuple[FakeGitHub, Pull], status: int, kind: str, words: str
) -> None:
    forge, pull = github
    forge.fault("PUT", "/merge$", status)
    result = forge_merge(job(pull.sha(forge.repos)), connection(forge))
    assert result.failure is not None and result.failure.kind == kind
    assert words in result.failure.message
    assert forge.count("PUT", "/merge$") == 1  # a refusal is not asked again


def test_a_failing_forge_is_asked_again(
    github: tuple[FakeGitHub, Pull], monkeypatch: pytest.MonkeyPatch
) -> None:
    forge, pull = github
    waits: list[float] = []
    forge.fault("POST", "/statuses/", 502)
    forge.fault("PUT", "/merge$", 502, times=2)
    result = forge_merge(job(pull.sha(forge.repos)), connection(forge), sleep=waits.append)
    assert result.status is Status.OK, result.failure
    assert waits == [1.0, 1.0, 2.0]
    assert forge.count("PUT", "/merge$") == 3 and len(forge.merges) == 1


def test_a_forge_down_for_good_fails_the_merge_with_a_clear_reason(
    github: tuple[FakeGitHub, Pull],
) -> None:
    forge, pull = github
    forge.fault("PUT", "/merge$", 503, times=merging.FORGE_TRIES)
    result = forge_merge(job(pull.sha(forge.repos)), connection(forge), sleep=lambda _: None)
    assert result.failure is not None and result.failure.kind == "forge"
    assert f"did not answer ({merging.FORGE_TRIES} tries)" in result.failure.message
    assert not forge.merges


def test_a_merge_answered_after_the_deadline_counts_once(github: tuple[FakeGitHub, Pull]) -> None:
    forge, pull = github
    forge.fault("PUT", "/merge$", delay=1.5)  # done, but answered after the client gave up
    settings = connection(forge)
    slow = ConnectionSettings("github", "github", "", {**settings.options, "api_timeout": 0.5})
    result = forge_merge(job(pull.sha(forge.repos)), slow, sleep=lambda _: None)
    assert result.status is Status.OK, result.failure
    assert len(forge.merges) == 1


def test_gitlab_pipelines_must_succeed_merges_after_the_status(repos: Repos) -> None:
    with FakeGitLab(repos, "", "secret") as forge:
        forge.require_pipeline("org/app")
        mr = forge.open("org/app", "fix", "Fix", hook=False)
        mr.approvers.append("reviewer")
        sha = mr.sha(repos)
        gitlab = PushJob(
            "j1",
            "gitlab",
            "org/app",
            "main",
            sha,
            change_ref="refs/merge-requests/1/head",
            change_commit=sha,
            report=REPORT,
        )
        result = forge_merge(gitlab, connection(forge, "gitlab"))
        assert result.status is Status.OK, result.failure
        assert [s["state"] for s in forge.statuses] == ["success"]
        assert len(forge.merges) == 1

        # without the status GitLab's 405 is a policy block, not a moved head
        base = repos.git("org/app", "rev-parse", "main")
        repos.commit("org/app", "more", {"c.txt": "c\n"}, base=base)
        repos.git("org/app", "checkout", "-q", "--detach")
        second = forge.open("org/app", "more", "More", hook=False)
        second.approvers.append("reviewer")
        head = second.sha(repos)
        refused = PushJob(
            "j2",
            "gitlab",
            "org/app",
            "main",
            head,
            change_ref="refs/merge-requests/2/head",
            change_commit=head,
        )
        result = forge_merge(refused, connection(forge, "gitlab"))
        assert result.failure is not None and result.failure.kind == NOT_MERGEABLE
