"""An edited title does not re-run ``check``; new commits do (GitLab sends ``oldrev`` then)."""

from __future__ import annotations

from tests.fixtures.fake_gitlab import FakeGitLab
from tests.fixtures.waiting import wait_until
from tests.web.server import WebServer
from tests.web.test_gitlab_journey import gitlab  # noqa: F401 (the fixture)


def test_only_new_commits_run_check_again(gitlab: tuple[FakeGitLab, WebServer]) -> None:  # noqa: F811
    forge, web = gitlab
    system = web.system
    mr = forge.open("group/lib", "feature", "Add a feature")
    wait_until(lambda: "success" in forge.statuses_of(mr), 90, "the check's status", 0.5)
    system.sluice("wait", "--idle", "--timeout", "60")

    forge.edit(mr, "Add a feature, better named")
    forge.label(mr, "docs")  # a label is no new revision either
    system.sluice("wait", "--idle", "--timeout", "60")
    assert [b["pipeline"] for b in system.buildsets()] == ["check"]

    forge.push(mr, {"feature.py": "x = 2\n"})
    wait_until(lambda: "success" in forge.statuses_of(mr), 90, "the new head's check", 0.5)
    system.sluice("wait", "--idle", "--timeout", "60")
    checks = [b for b in system.buildsets() if b["pipeline"] == "check"]
    assert len(checks) == 2 and all(b["result"] == "SUCCESS" for b in checks)
