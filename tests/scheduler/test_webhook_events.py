"""GitHub and GitLab webhook bodies as trigger events; malformed ones are errors."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from scheduler.drivers import webhooks
from scheduler.layouts.triggers import filter_matches
from scheduler.wire.events import MalformedEventError

REPO = {"full_name": "org/app"}
PULL = {
    "number": 7,
    "title": "Fix it",
    "head": {"sha": "a" * 40, "ref": "fix"},
    "base": {"ref": "main"},
    "labels": [{"name": "gate"}],
}


def github(event: str, body: Mapping[str, object]) -> list[dict[str, object]]:
    payload = {"type": "webhook", "driver": "github", "event": event, "body": body}
    return [t.to_dict() for t in webhooks.translate(payload)]


def gitlab(event: str, body: Mapping[str, object]) -> list[dict[str, object]]:
    payload = {"type": "webhook", "driver": "gitlab", "event": event, "body": body}
    return [t.to_dict() for t in webhooks.translate(payload)]


def test_github_pull_requests_pushes_comments_reviews() -> None:
    (opened,) = github(
        "pull_request", {"action": "opened", "pull_request": PULL, "repository": REPO}
    )
    assert opened["type"] == "pull_request" and opened["action"] == "opened"
    assert (opened["project"], opened["branch"], opened["ref"]) == (
        "org/app",
        "main",
        "refs/pull/7/head",
    )
    assert opened["newrev"] == "a" * 40 and opened["labels"] == ["gate"] and opened["change"] == 7
    (changed,) = github(
        "pull_request", {"action": "synchronize", "pull_request": PULL, "repository": REPO}
    )
    assert changed["action"] == "changed"
    (labeled,) = github(
        "pull_request",
        {"action": "labeled", "label": {"name": "gate"}, "pull_request": PULL, "repository": REPO},
    )
    assert labeled["label"] == "gate"
    assert filter_matches({"event": "pull_request", "action": "labeled", "label": "gate"}, labeled)
    assert not filter_matches({"event": "pull_request", "action": "opened"}, labeled)

    comment = {
        "issue": {"number": 7, "pull_request": {}, "title": "Fix it"},
        "comment": {"body": "recheck"},
        "repository": REPO,
    }
    (recheck,) = github("issue_comment", comment)
    assert recheck["action"] == "comment" and recheck["comment"] == "recheck"
    assert filter_matches(
        {"event": "pull_request", "action": "comment", "comment": "(?i)^\\s*recheck\\s*$"}, recheck
    )
    assert github("issue_comment", {**comment, "issue": {"number": 1}}) == []  # not a PR

    review = {
        "action": "submitted",
        "review": {"state": "APPROVED"},
        "pull_request": PULL,
        "repository": REPO,
    }
    (approved,) = github("pull_request_review", review)
    assert approved["state"] == "approved"

    push = {"ref": "refs/tags/v1", "before": "0" * 40, "after": "b" * 40, "repository": REPO}
    (tag,) = github("push", push)
    assert tag["type"] == "push" and "branch" not in tag  # a tag is no branch
    assert tag["ref"] == "refs/tags/v1" and tag["newrev"] == "b" * 40


def test_gitlab_merge_requests_pushes_notes() -> None:
    project = {"path_with_namespace": "group/lib"}
    mr = {
        "iid": 3,
        "action": "update",
        "oldrev": "b" * 40,  # new commits pushed
        "target_branch": "main",
        "last_commit": {"id": "c" * 40},
    }
    (update,) = gitlab("Merge Request Hook", {"object_attributes": mr, "project": project})
    assert update["type"] == "gl_merge_request" and update["action"] == "changed"
    assert update["ref"] == "refs/merge-requests/3/head" and update["newrev"] == "c" * 40
    note = {"object_attributes": {"note": "recheck"}, "merge_request": mr, "project": project}
    (recheck,) = gitlab("Note Hook", note)
    assert recheck["action"] == "comment" and recheck["comment"] == "recheck"
    push = {"ref": "refs/heads/main", "before": "d" * 40, "after": "e" * 40, "project": project}
    (pushed,) = gitlab("Push Hook", push)
    assert pushed["type"] == "gl_push" and pushed["branch"] == "main"


@pytest.mark.parametrize(
    "event, body",
    [
        ("push", {"ref": "refs/heads/main"}),  # no repository
        ("pull_request", {"action": "opened", "repository": REPO}),  # no pull_request
        ("pull_request", {"action": "opened", "pull_request": {"number": "x"}, "repository": REPO}),
    ],
)
def test_malformed_bodies_are_errors(event: str, body: dict[str, object]) -> None:
    with pytest.raises((MalformedEventError, ValueError)):
        github(event, body)


def test_github_check_runs_and_statuses() -> None:
    run = {
        "name": "other-ci",
        "head_sha": "a" * 40,
        "pull_requests": [{"number": 7, "head": {"sha": "a" * 40}, "base": {"ref": "main"}}],
    }
    (rerun,) = github("check_run", {"action": "rerequested", "check_run": run, "repository": REPO})
    assert (rerun["type"], rerun["action"], rerun["check"]) == (
        "check_run",
        "rerequested",
        "other-ci",
    )
    assert rerun["ref"] == "refs/pull/7/head"
    assert filter_matches(
        {"event": "check_run", "action": "rerequested", "check": "other-.*"}, rerun
    )

    status = {"sha": f"{2:040d}", "context": "other-ci", "state": "success", "repository": REPO}
    assert github("status", status) == []  # without an API client no pull request is known
    from tests.scheduler.test_depends_on import Pulls  # a stub GitHub API

    payload = {"type": "webhook", "driver": "github", "event": "status", "body": status}
    (found,) = [t.to_dict() for t in webhooks.translate(payload, Pulls({1: "", 2: ""}))]
    assert (found["ref"], found["status"]) == ("refs/pull/2/head", "other-ci:success")
    assert filter_matches({"event": "status", "status": "other-ci:success"}, found)


class Untouchable:
    """A forge client that must not be asked anything but who it is."""

    def login(self) -> str:
        return "sluice-bot"

    def __getattr__(self, name: str) -> object:
        raise AssertionError(f"the forge was asked {name}")


def comment_body(text: str, author: str) -> dict[str, object]:
    issue = {"number": 3, "title": "T", "pull_request": {}}
    comment = {"body": text, "user": {"login": author}}
    return {"issue": issue, "comment": comment, "repository": {"full_name": "org/app"}}


def test_nothing_is_read_for_what_nobody_listens_to() -> None:
    """Our own report comes back as a webhook, a comment no trigger wants, a status
    nobody triggers on: none costs a call."""
    api = Untouchable()
    own = {"type": "webhook", "driver": "github", "event": "issue_comment"}
    mine = {**own, "body": comment_body("Build succeeded (t/check).", "sluice-bot")}
    assert webhooks.translate(mine, api) == []
    chatter = {**own, "body": comment_body("looks good", "ann")}
    assert webhooks.translate(chatter, api, lambda trigger: False) == []
    status = {
        "type": "webhook",
        "driver": "github",
        "event": "status",
        "body": {"sha": "a" * 40, "context": "t/check", "state": "success", "repository": REPO},
    }
    assert webhooks.translate(status, api, lambda trigger: False) == []
