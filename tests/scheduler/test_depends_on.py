"""Depends-On lines in GitHub and GitLab descriptions, followed through the chain."""

from __future__ import annotations

from typing import Any

from scheduler.drivers import depends
from scheduler.drivers.github import events as github
from scheduler.drivers.gitlab import events as gitlab
from scheduler.drivers.gitlab.api import ApprovalState


class Pulls:
    """A stub GitHub API: pull requests by number."""

    def __init__(self, bodies: dict[int, str], merged: frozenset[int] = frozenset()) -> None:
        self.bodies = bodies
        self.merged = merged

    def pull(self, project: str, number: int) -> dict[str, Any]:
        return {
            "number": number,
            "body": self.bodies.get(number, ""),
            "merged": number in self.merged,
            "state": "closed" if number in self.merged else "open",
            "head": {"sha": f"{number:040d}"},
            "base": {"ref": "main"},
            "labels": [{"name": "gate"}],
        }

    def reviews(self, project: str, number: int) -> list[dict[str, Any]]:
        return [{"user": {"login": "r"}, "state": "APPROVED"}]

    def statuses(self, project: str, sha: str) -> list[str]:
        return ["t/check:success"]

    def commit_messages(self, project: str, number: int) -> list[str]:
        return []

    def pull_commits(self, project: str, number: int, head: str = "") -> list[tuple[str, str]]:
        return [(sha, "") for sha in self.commits_between(project, "main", f"{number:040d}")]

    def pulls_of_commit(self, project: str, sha: str) -> list[dict[str, Any]]:
        return [p for p in self.open_pulls(project) if p["head"]["sha"] == sha]

    def open_pulls(self, project: str) -> list[dict[str, Any]]:
        return [self.pull(project, n) for n in self.bodies if n not in self.merged]

    def commits_between(self, project: str, base: str, head: str) -> list[str]:
        return [head, f"{1:040d}"]  # every head is built on pull request 1


def test_github_git_parents_are_dependencies() -> None:
    api = Pulls({1: "", 2: ""})
    needs = github.parents_of(api, "org/app", 2, api.pull("org/app", 2))
    assert refs(needs) == ["refs/pull/1/head"]
    assert github.parents_of(api, "org/app", 1, api.pull("org/app", 1)) == []


def refs(needs: list[dict[str, Any]]) -> list[str]:
    return [n["ref"] for n in needs]


def test_github_chains_skip_merged_and_mark_cycles() -> None:
    url = "Depends-On: https://github.com/org/app/pull/{}"
    api = Pulls({3: url.format(2), 2: url.format(1)})
    needs = github.needs_of(api, "org/app", 3, api.bodies[3])
    assert refs(needs) == ["refs/pull/1/head", "refs/pull/2/head"]  # deepest first
    assert needs[0]["approvals"] == ["r"] and needs[0]["labels"] == ["gate"]
    merged = Pulls({3: url.format(2), 2: url.format(1)}, merged=frozenset({1}))
    assert refs(github.needs_of(merged, "org/app", 3, merged.bodies[3])) == ["refs/pull/2/head"]
    loop = Pulls({3: url.format(2), 2: url.format(3)})
    assert refs(github.needs_of(loop, "org/app", 3, loop.bodies[3])) == [
        "refs/pull/3/head",
        "refs/pull/2/head",
    ]
    text = "Fixes it.\nDepends-On: https://github.example.com/org/lib/pull/7\nThanks"
    assert depends.depends_on(github.DEPENDS_ON, text) == [("org/lib", 7)]


class MergeRequests:
    def __init__(self, descriptions: dict[int, str]) -> None:
        self.descriptions = descriptions

    def merge_request(self, project: str, iid: int) -> dict[str, Any]:
        return {
            "iid": iid,
            "state": "opened",
            "sha": f"{iid:040d}",
            "target_branch": "main",
            "description": self.descriptions.get(iid, ""),
            "labels": ["gate"],
        }

    def approvals(self, project: str, iid: int) -> ApprovalState:
        return ApprovalState(True, ("r",))

    def open_merge_requests(self, project: str) -> list[dict[str, Any]]:
        return [self.merge_request(project, iid) for iid in self.descriptions]

    def commits(self, project: str, iid: int, head: str) -> list[dict[str, Any]]:
        # every head is built on merge request 4
        return [{"id": head, "message": ""}, {"id": f"{4:040d}", "message": ""}]


def test_gitlab_merge_request_urls() -> None:
    api = MergeRequests(
        {5: "Depends-On: https://gitlab.example.com/group/sub/lib/-/merge_requests/4"}
    )
    needs = gitlab.needs_of(api, "group/app", 5, api.descriptions[5])
    assert [(n["project"], n["ref"]) for n in needs] == [
        ("group/sub/lib", "refs/merge-requests/4/head")
    ]


def test_gitlab_git_parents_are_dependencies() -> None:
    api = MergeRequests({4: "", 5: ""})
    needs = gitlab.parents_of(api, "group/app", 5, api.merge_request("group/app", 5))
    assert [n["ref"] for n in needs] == ["refs/merge-requests/4/head"]
