"""GitLab's lists read whole: what matters may be beyond the first page.

130 open merge requests and a merge request of 130 commits, whose oldest
commit (last on GitLab's newest-first list, so on its second page) says
``Depends-On:`` the first merge request: its check runs on top of it.
"""

from __future__ import annotations

from tests.fixtures.fake_gitlab import FakeGitLab
from tests.fixtures.waiting import wait_until
from tests.web.server import WebServer
from tests.web.test_gitlab_journey import gitlab  # noqa: F401 (the fixture)

DEPENDS_ON = "Depends-On: https://gitlab.example.com/group/lib/-/merge_requests/1"


def test_a_depends_on_beyond_the_first_page(gitlab: tuple[FakeGitLab, WebServer]) -> None:  # noqa: F811
    forge, web = gitlab
    system = web.system
    feature = forge.open("group/lib", "feature", "Add a feature")
    for _ in range(128):
        forge.open("group/lib", "main", "Nothing yet", hook=False)
    repos = system.repos
    base = repos.git("group/lib", "rev-parse", "main")
    repos.commit("group/lib", "more", {"more.py": "y = 2\n"}, base=base, message=DEPENDS_ON)
    for n in range(129):
        repos.git("group/lib", "commit", "-q", "--allow-empty", "-m", f"Step {n}")
    repos.git("group/lib", "checkout", "-q", "--detach")
    more = forge.open("group/lib", "more", "Add more")
    assert more.iid == 130

    wait_until(lambda: "success" in forge.statuses_of(more), 90, "the dependent's check", 0.5)
    system.sluice("wait", "--idle", "--timeout", "60")
    (check,) = [b for b in system.buildsets() if b["ref"] == "refs/merge-requests/130/head"]
    assert check["result"] == "SUCCESS"  # more.py's job found feature.py: tested on top of !1
    assert forge.count("GET", r"/merge_requests/130/commits$") == 2  # 100, then 30
    assert forge.count("GET", r"/merge_requests$") >= 2  # the open ones: 100, then 30
    assert "success" in forge.statuses_of(feature)
