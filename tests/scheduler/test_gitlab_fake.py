"""The fake GitLab answers as GitLab does: pages, the merge's 405 and 409, approvals, hooks."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.system import Repos
from tests.fixtures.fake_gitlab import BOT, TOKEN, FakeGitLab
from tests.fixtures.waiting import wait_until

MR = "/projects/group%2Flib/merge_requests/1"


@pytest.fixture
def forge(tmp_path: Path) -> Iterator[FakeGitLab]:
    repos = Repos(tmp_path / "repos")
    base = repos.commit("group/lib", "main", {"a.txt": "a\n"})
    repos.commit("group/lib", "fix", {"b.txt": "b\n"}, base=base)
    repos.git("group/lib", "checkout", "-q", "--detach")
    with FakeGitLab(repos, "", "secret") as found:
        found.open("group/lib", "fix", "Fix")
        yield found


def call(
    forge: FakeGitLab, method: str, path: str, body: Any = None, token: str = TOKEN
) -> tuple[int, Any, dict[str, str]]:
    data = None if body is None else json.dumps(body).encode()
    headers = {"PRIVATE-TOKEN": token, "Content-Type": "application/json"}
    request = urllib.request.Request(forge.url + path, data, headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, json.loads(answer.read()), dict(answer.headers)
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null"), dict(exc.headers)


def test_lists_are_paginated_as_gitlab_does(forge: FakeGitLab) -> None:
    mr = forge.mrs[("group/lib", 1)]
    for n in range(45):
        call(forge, "POST", f"{MR}/notes", {"body": f"note {n}"})
    status, first, headers = call(forge, "GET", f"{MR}/notes")
    assert status == 200 and len(first) == 20 and first[0]["body"] == "note 44"
    assert (headers["X-Page"], headers["X-Next-Page"], headers["X-Prev-Page"]) == ("1", "2", "")
    assert (headers["X-Total"], headers["X-Total-Pages"], headers["X-Per-Page"]) == (
        "45",
        "3",
        "20",
    )
    assert f'<{forge.address}/api/v4{MR}/notes?page=2>; rel="next"' in headers["Link"]
    _, last, headers = call(forge, "GET", f"{MR}/notes?page=3")
    assert len(last) == 5 and headers["X-Next-Page"] == "" and 'rel="next"' not in headers["Link"]
    _, everything, headers = call(forge, "GET", f"{MR}/notes?per_page=500")
    assert len(everything) == 45 and headers["X-Per-Page"] == "100"  # at most 100 a page
    assert forge.count("GET", r"/notes$") == 3 and forge.count("POST", r"/notes$") == 45
    assert ("GET", f"/api/v4{MR}/notes") in forge.calls
    assert mr.iid == 1


def test_the_merge_answers_405_for_policy_and_409_for_a_moved_head(forge: FakeGitLab) -> None:
    mr = forge.mrs[("group/lib", 1)]
    sha = mr.sha(forge.repos)
    forge.require_pipeline("group/lib")
    assert call(forge, "PUT", f"{MR}/merge", {"sha": sha})[:2] == (
        405,
        {"message": "405 Method Not Allowed"},
    )  # no approval yet
    _, approvals, _ = call(forge, "GET", f"{MR}/approvals")
    assert (approvals["approved"], approvals["approvals_required"]) == (False, 1)
    assert (approvals["approvals_left"], approvals["approved_by"]) == (1, [])
    forge.approve(mr, "alice")
    _, approvals, _ = call(forge, "GET", f"{MR}/approvals")
    assert approvals["approved"] and approvals["approvals_left"] == 0
    assert [a["user"]["username"] for a in approvals["approved_by"]] == ["alice"]
    assert forge.sent[-1][1]["object_attributes"]["action"] == "approved"

    assert call(forge, "PUT", f"{MR}/merge", {"sha": sha})[0] == 405  # no pipeline
    call(forge, "POST", f"/projects/group%2Flib/statuses/{sha}", {"state": "pending", "name": "ci"})
    assert call(forge, "PUT", f"{MR}/merge", {"sha": sha})[0] == 405  # pipeline still running
    call(forge, "POST", f"/projects/group%2Flib/statuses/{sha}", {"state": "success", "name": "ci"})
    status, answer, _ = call(forge, "PUT", f"{MR}/merge", {"sha": "f" * 40})
    assert (status, answer) == (409, {"message": "SHA does not match HEAD of source branch"})
    mr.title = "Draft: Fix"
    assert call(forge, "PUT", f"{MR}/merge", {"sha": sha})[0] == 405
    mr.title = "Fix"
    status, answer, _ = call(forge, "PUT", f"{MR}/merge", {"sha": sha})
    assert status == 200 and answer["state"] == "merged" and forge.merges
    assert call(forge, "PUT", f"{MR}/merge", {"sha": sha})[0] == 405  # merged: no longer open
    wait_until(lambda: [e for e, _ in forge.sent][-2:] == ["Merge Request Hook", "Push Hook"])


def test_two_approvals_required(forge: FakeGitLab) -> None:
    forge.require_approvals("group/lib", 2)
    forge.repos.commit("group/lib", "other", {"c.txt": "c\n"}, base="main")
    forge.repos.git("group/lib", "checkout", "-q", "--detach")
    mr = forge.open("group/lib", "other", "Other")
    forge.approve(mr, "alice")
    assert forge.sent[-1][1]["object_attributes"]["action"] == "approval"
    _, approvals, _ = call(forge, "GET", f"/projects/group%2Flib/merge_requests/{mr.iid}/approvals")
    assert (approvals["approved"], approvals["approvals_left"]) == (False, 1)
    forge.approve(mr, "bob")
    _, approvals, _ = call(forge, "GET", f"/projects/group%2Flib/merge_requests/{mr.iid}/approvals")
    assert (approvals["approved"], approvals["approvals_left"]) == (True, 0)


def test_notes_come_back_as_hooks_by_the_token_user_and_faults_play(forge: FakeGitLab) -> None:
    assert call(forge, "GET", "/user")[1]["username"] == BOT
    call(forge, "POST", f"{MR}/notes", {"body": "Build succeeded."})
    wait_until(lambda: forge.sent[-1][0] == "Note Hook")
    note = forge.sent[-1][1]
    assert note["user"]["username"] == BOT and note["merge_request"]["iid"] == 1
    assert note["object_attributes"]["note"] == "Build succeeded."
    forge.fault("GET", r"/approvals$", 429, headers={"RateLimit-Reset": "1"})
    assert call(forge, "GET", f"{MR}/approvals")[0] == 429
    assert call(forge, "GET", f"{MR}/approvals")[0] == 200
    assert call(forge, "GET", MR, token="wrong")[0] == 401
    assert call(forge, "GET", "/projects/group%2Fnone/merge_requests/1")[0] == 404
    assert call(forge, "GET", "/projects/group%2Flib/merge_requests/1%2F")[0] == 404


def test_updates_carry_oldrev_only_for_new_commits(forge: FakeGitLab) -> None:
    mr = forge.mrs[("group/lib", 1)]
    old = mr.sha(forge.repos)
    forge.edit(mr, "Fix it")
    edited = forge.sent[-1][1]
    assert "oldrev" not in edited["object_attributes"] and "title" in edited["changes"]
    new = forge.push(mr, {"d.txt": "d\n"})
    pushed = forge.sent[-1][1]["object_attributes"]
    assert pushed["oldrev"] == old and pushed["last_commit"]["id"] == new == mr.sha(forge.repos)
