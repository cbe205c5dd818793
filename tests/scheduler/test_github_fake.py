"""The fake GitHub answers as GitHub does: pages, protected branches, check runs, faults."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.fake_github import TOKEN, FakeGitHub, github_with_a_pull


@pytest.fixture
def forge(tmp_path: Path) -> Iterator[FakeGitHub]:
    with github_with_a_pull(tmp_path / "repos") as found:
        yield found


def call(
    forge: FakeGitHub, method: str, path: str, body: Any = None, token: str = TOKEN
) -> tuple[int, Any, dict[str, str]]:
    data = None if body is None else json.dumps(body).encode()
    headers = {"Authorization": f"token {token}", "Content-Type": "application/json"}
    request = urllib.request.Request(forge.url + path, data, headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, json.loads(answer.read()), dict(answer.headers)
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null"), dict(exc.headers)


def test_lists_are_paginated_as_github_does(forge: FakeGitHub) -> None:
    pull = forge.pulls[("org/app", 1)]
    forge.add_reviews(pull, 45)
    status, first, headers = call(forge, "GET", "/repos/org/app/pulls/1/reviews")
    assert status == 200 and len(first) == 30
    assert 'page=2>; rel="next"' in headers["Link"] and 'rel="last"' in headers["Link"]
    status, second, headers = call(forge, "GET", "/repos/org/app/pulls/1/reviews?page=2")
    assert len(second) == 15 and 'rel="next"' not in headers["Link"]
    _, everything, headers = call(forge, "GET", "/repos/org/app/pulls/1/reviews?per_page=500")
    assert len(everything) == 45 and "Link" not in headers  # per_page is at most 100
    assert forge.count("GET", r"/reviews$") == 3
    assert forge.calls[0] == ("GET", "/repos/org/app/pulls/1/reviews")


def test_a_protected_branch_merges_only_with_its_required_statuses(forge: FakeGitHub) -> None:
    sha = forge.pulls[("org/app", 1)].sha(forge.repos)
    forge.protect("org/app", "main", ["demo/gate"])
    merge = {"sha": sha, "merge_method": "merge"}
    status, answer, _ = call(forge, "PUT", "/repos/org/app/pulls/1/merge", merge)
    assert (status, answer) == (405, {"message": 'Required status check "demo/gate" is expected.'})
    for state in ("success", "pending"):  # the latest one counts
        call(
            forge,
            "POST",
            f"/repos/org/app/statuses/{sha}",
            {"state": state, "context": "demo/gate"},
        )
    assert call(forge, "PUT", "/repos/org/app/pulls/1/merge", merge)[0] == 405
    call(
        forge,
        "POST",
        f"/repos/org/app/statuses/{sha}",
        {"state": "success", "context": "demo/gate"},
    )
    status, answer, _ = call(forge, "PUT", "/repos/org/app/pulls/1/merge", merge)
    assert status == 200 and answer["merged"] is True
    assert forge.merges == [{"project": "org/app", "number": 1, "sha": sha, "method": "merge"}]
    assert call(forge, "PUT", "/repos/org/app/pulls/1/merge", merge)[0] == 405  # merged already


def test_merge_answers_a_moved_head_and_a_bad_method(forge: FakeGitHub) -> None:
    moved = {"sha": "f" * 40, "merge_method": "merge"}
    status, answer, _ = call(forge, "PUT", "/repos/org/app/pulls/1/merge", moved)
    assert status == 409 and answer["message"].startswith("Head branch was modified")
    status, _, _ = call(forge, "PUT", "/repos/org/app/pulls/1/merge", {"merge_method": "octopus"})
    assert status == 422


def test_check_runs_need_an_installation_token(forge: FakeGitHub) -> None:
    sha = forge.pulls[("org/app", 1)].sha(forge.repos)
    run = {"name": "demo/check", "head_sha": sha, "status": "completed", "conclusion": "success"}
    status, answer, _ = call(forge, "POST", "/repos/org/app/check-runs", run)
    assert (status, answer["message"]) == (403, "Resource not accessible by integration")
    assert forge.check_runs == []


def test_faults_answer_the_next_matching_calls(forge: FakeGitHub) -> None:
    forge.fault("GET", r"/pulls/1$", 502, times=2)
    forge.fault("POST", r"/statuses/", 429, headers={"Retry-After": "7"})
    assert call(forge, "GET", "/repos/org/app/pulls/1")[0] == 502
    assert call(forge, "GET", "/repos/org/app/pulls/1/reviews")[0] == 200  # not matched
    assert call(forge, "GET", "/repos/org/app/pulls/1")[0] == 502
    assert call(forge, "GET", "/repos/org/app/pulls/1")[0] == 200
    sha = "a" * 40
    status, _, headers = call(forge, "POST", f"/repos/org/app/statuses/{sha}", {"state": "success"})
    assert (status, headers["Retry-After"]) == (429, "7") and forge.statuses == []
    forge.fault("GET", r"/pulls/1$", delay=0.5)
    started = time.monotonic()
    assert call(forge, "GET", "/repos/org/app/pulls/1")[0] == 200
    assert time.monotonic() - started >= 0.5
    assert forge.count("GET", r"/pulls/1$") == 4
