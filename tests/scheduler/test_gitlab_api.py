"""The GitLab client against the fake GitLab: whole lists, approval state, quoting, the user."""

from __future__ import annotations

import pytest

from scheduler.drivers.gitlab import events
from scheduler.drivers.gitlab.api import GitLabApi, GitLabError
from scheduler.settings.sections import ConnectionSettings
from scheduler.wire.events import MalformedEventError
from tests.fixtures.fake_gitlab import BOT, TOKEN, FakeGitLab, MergeRequest
from tests.scheduler.test_gitlab_fake import forge  # noqa: F401 (the fixture)

FILLERS = 129


def api_of(gitlab: FakeGitLab) -> GitLabApi:
    options = {"api_url": gitlab.url, "api_token": TOKEN}
    return GitLabApi(ConnectionSettings("gitlab", "gitlab", "", options), sleep=lambda _: None)


def test_a_parent_beyond_the_first_page_of_open_merge_requests(
    forge: FakeGitLab,  # noqa: F811
) -> None:
    for _ in range(FILLERS):  # after !1 (fix): !1 is last of 131, newest first
        forge.open("group/lib", "main", "Nothing")
    feature = forge.repos.git("group/lib", "rev-parse", "fix")
    commits = [forge.repos.commit("group/lib", "more", {"c.txt": "c\n"}, base=feature)]
    for n in range(129):
        forge.repos.git("group/lib", "commit", "-q", "--allow-empty", "-m", f"step {n}")
    forge.repos.git("group/lib", "checkout", "-q", "--detach")
    more = forge.open("group/lib", "more", "More")
    api = api_of(forge)
    assert len(api.open_merge_requests("group/lib")) == FILLERS + 2
    listed = api.commits("group/lib", more.iid, more.sha(forge.repos))
    assert len(listed) == 131 and listed[-2]["id"] == commits[0]  # newest first
    parents = events.parents_of(api, "group/lib", more.iid, api.merge_request("group/lib", 131))
    assert [p["ref"] for p in parents] == ["refs/merge-requests/1/head"]
    assert forge.count("GET", r"/merge_requests$") == 2 * 2  # twice read: 100, then 31
    assert forge.count("GET", r"/merge_requests/131/commits$") == 2  # once: kept for its head


def test_approval_state_user_and_quoting(forge: FakeGitLab) -> None:  # noqa: F811
    api = api_of(forge)
    mr: MergeRequest = forge.mrs[("group/lib", 1)]
    mr.approvals_required = 2
    forge.approve(mr, "alice")
    state = api.approvals("group/lib", 1)
    assert (state.approved, state.approvers) == (False, ("alice",))
    forge.approve(mr, "bob")
    assert api.approvals("group/lib", 1).approved
    assert api.user() == BOT and api_of(forge).user() == BOT
    assert forge.count("GET", r"/user$") == 1  # once a process
    with pytest.raises(GitLabError) as refused:
        api.set_status("group/lib", "a b/../x", "success", context="t/check", description="d")
    assert refused.value.status == 404
    assert forge.calls[-1] == ("POST", "/api/v4/projects/group%2Flib/statuses/a%20b%2F..%2Fx")
    forge.fault("GET", r"/approvals$", 429, headers={"RateLimit-Reset": "0"})
    assert api.approvals("group/lib", 1).approved  # waited, tried again


def test_a_token_that_may_not_read_its_user_recognises_no_note(
    forge: FakeGitLab,  # noqa: F811
) -> None:
    forge.fault("GET", r"/user$", 403, body={"message": "403 Forbidden - insufficient_scope"})
    api = api_of(forge)
    assert api.user() == "" and api.user() == ""
    assert forge.count("GET", r"/user$") == 1


def test_a_depends_on_naming_no_merge_request_is_no_dependency(forge: FakeGitLab) -> None:  # noqa: F811
    api = api_of(forge)
    text = "Depends-On: https://gitlab.example.com/group/lib/-/merge_requests/99\n"
    assert events.needs_of(api, "group/lib", 1, text) == []
    with pytest.raises(MalformedEventError):
        events.needs_of(api, "group/lib", 1, text.replace("group/lib", "group/-lib"))
