"""GitLab hooks as events: update actions, hostile project paths, what each hook reads."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.drivers.gitlab import events
from scheduler.drivers.gitlab.api import ApprovalState
from scheduler.layouts.triggers import requirements_met
from scheduler.wire.events import MalformedEventError

PROJECT = {"path_with_namespace": "group/lib"}
HEAD = "c" * 40


def hook(action: str, **attributes: Any) -> dict[str, Any]:
    mr = {"iid": 3, "action": action, "target_branch": "main", "last_commit": {"id": HEAD}}
    return {"object_attributes": {**mr, **attributes}, "project": PROJECT}


class CountingApi:
    """GitLab as the driver reads it, counting each read."""

    def __init__(self, approved: bool = True, commits: int = 1) -> None:
        self.reads: list[str] = []
        self.approved = approved
        self.commit_count = commits

    def user(self) -> str:
        self.reads.append("user")
        return "sluice-bot"

    def merge_request(self, project: str, iid: int) -> dict[str, Any]:
        self.reads.append(f"mr {iid}")
        return {"iid": iid, "state": "opened", "sha": HEAD, "target_branch": "main"}

    def approvals(self, project: str, iid: int) -> ApprovalState:
        self.reads.append(f"approvals {iid}")
        return ApprovalState(self.approved, ("alice",))

    def commits(self, project: str, iid: int, head: str) -> list[dict[str, Any]]:
        self.reads.append(f"commits {iid}")
        return [{"id": f"{n:040x}" if n else head, "message": ""} for n in range(self.commit_count)]

    def open_merge_requests(self, project: str) -> list[dict[str, Any]]:
        self.reads.append("open")
        return []


def test_only_new_commits_make_an_update_changed() -> None:
    (pushed,) = events.translate("Merge Request Hook", hook("update", oldrev="b" * 40))
    assert pushed.extra["action"] == "changed"
    (edited,) = events.translate(
        "Merge Request Hook", {**hook("update"), "changes": {"title": {"current": "x"}}}
    )
    assert edited.extra["action"] == "edited"
    labels = {"labels": {"previous": [], "current": [{"title": "gate"}]}}
    (labeled,) = events.translate("Merge Request Hook", {**hook("update"), "changes": labels})
    assert (labeled.extra["action"], labeled.extra["label"]) == ("labeled", "gate")
    (approval,) = events.translate("Merge Request Hook", hook("approval"))
    assert approval.extra["action"] == "approved"


@pytest.mark.parametrize(
    "path", ["group/lib x", "group/lib\n", "group/\x00lib", "lib", "-group/lib", "group/../lib", 7]
)
def test_a_project_path_gitlab_could_not_have_is_malformed(path: object) -> None:
    body = {**hook("open"), "project": {"path_with_namespace": path}}
    with pytest.raises(MalformedEventError):
        events.translate("Merge Request Hook", body)
    push = {"ref": "refs/heads/main", "after": HEAD, "project": {"path_with_namespace": path}}
    with pytest.raises(MalformedEventError):
        events.translate("Push Hook", push)


def test_our_own_notes_are_dropped_before_any_read() -> None:
    api = CountingApi()
    note = {
        "object_attributes": {"note": "Build succeeded."},
        "merge_request": hook("")["object_attributes"],
        "project": PROJECT,
        "user": {"username": "sluice-bot"},
    }
    assert events.translate("Note Hook", note, api) == []
    assert api.reads == ["user"]
    (recheck,) = events.translate(
        "Note Hook",
        {**note, "user": {"username": "alice"}, "object_attributes": {"note": "recheck"}},
        api,
    )
    assert recheck.extra["comment"] == "recheck"
    assert api.reads == ["user", "user", "mr 3", "approvals 3", "commits 3"]


def test_each_hook_reads_what_it_needs() -> None:
    api = CountingApi()
    events.translate("Merge Request Hook", hook("open"), api)
    assert api.reads == ["mr 3", "approvals 3", "commits 3"]  # one commit: no parent possible
    api = CountingApi(commits=3)
    events.translate("Merge Request Hook", hook("open"), api)
    assert api.reads == ["mr 3", "approvals 3", "commits 3", "open"]
    api = CountingApi()
    (merged,) = events.translate("Merge Request Hook", hook("merge"), api)
    assert api.reads == [] and merged.extra["merged"] and not merged.extra["open"]


def test_approved_is_gitlabs_verdict_not_someone_approving() -> None:
    (one_of_two,) = events.translate("Merge Request Hook", hook("approval"), CountingApi(False))
    assert one_of_two.extra["approvals"] == ["alice"] and not one_of_two.extra["approved"]
    assert not requirements_met({"approved": True}, one_of_two.to_dict())
    (enough,) = events.translate("Merge Request Hook", hook("approved"), CountingApi(True))
    assert requirements_met({"approved": True, "open": True}, enough.to_dict())
