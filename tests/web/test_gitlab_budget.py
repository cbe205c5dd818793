"""What a merge request's journey costs GitLab: at most 25 API calls, counted by the fake.

Opened, checked, ``recheck``, labelled, approved, gated and merged through
the API. Each hook reads the merge request once; Sluice's own notes (its
reports, sent back by GitLab as ``Note Hook``) read nothing at all.
"""

from __future__ import annotations

from tests.fixtures.fake_gitlab import BOT, FakeGitLab
from tests.fixtures.waiting import wait_until
from tests.web.server import WebServer
from tests.web.test_gitlab_journey import gitlab  # noqa: F401 (the fixture)

BUDGET = 25


def test_a_journey_costs_at_most_25_calls(gitlab: tuple[FakeGitLab, WebServer]) -> None:  # noqa: F811
    forge, web = gitlab
    system = web.system
    mr = forge.open("group/lib", "feature", "Add a feature")
    wait_until(lambda: len(forge.notes) == 1, 90, "the check's note", 0.2)
    forge.note(mr, "recheck")
    wait_until(lambda: len(forge.notes) == 2, 90, "the recheck's note", 0.2)
    forge.label(mr, "gate")
    forge.approve(mr)
    wait_until(lambda: forge.merges and len(forge.notes) == 3, 90, "the merge and its note", 0.2)
    wait_until(lambda: _own_notes_sent(forge) == 3, 30, "GitLab's hooks of our notes", 0.2)
    system.sluice("wait", "--idle", "--timeout", "60")

    assert sorted(b["pipeline"] for b in system.buildsets()) == ["check", "check", "gate"]
    calls = list(forge.calls)
    assert len(calls) <= BUDGET, "\n".join(f"{m} {p}" for m, p in calls)
    # one read of the merge request per hook that is not ours: opened, recheck, label, approval
    assert forge.count("GET", r"/merge_requests/1$") == 4


def _own_notes_sent(forge: FakeGitLab) -> int:
    return sum(1 for e, b in list(forge.sent) if e == "Note Hook" and b["user"]["username"] == BOT)
