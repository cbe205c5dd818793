"""What a GitHub deployment sends and answers, on real workers through ``sluice web``.

* A pull request with more reviews than a page holds is gated on the
  approval that comes last (reviews read through every page).
* A signed delivery whose repository name GitHub could not have given
  (``org/app x``) is set aside with its reason before any API call, and
  the pull request opened after it is checked.
"""

from __future__ import annotations

from tests.e2e.system import SluiceSystem
from tests.fixtures.waiting import wait_until
from tests.web.test_github_journey import CONFIG, forge_system


def test_an_approval_beyond_the_first_page_of_reviews_is_seen(system: SluiceSystem) -> None:
    with forge_system(system, CONFIG) as (forge, _web):
        pull = forge.open_pull("org/app", "fix", "Fix the thing")
        wait_until(lambda: "success" in forge.statuses_of(pull), 90, "the check", 0.5)
        # 144 comments as reviews, then the approval: page 2 at 30 a page as at 100
        forge.add_reviews(pull, 144)
        forge.approve(pull, notify=False)
        forge.label(pull, "gate")
        wait_until(lambda: forge.merges, 90, "the approved pull request merged", 0.5)
        system.sluice("wait", "--idle", "--timeout", "60")
        assert forge.count("GET", r"/pulls/1/reviews$") >= 2  # the first page, then the next


def test_a_repository_name_github_cannot_have_is_set_aside_without_a_call(
    system: SluiceSystem,
) -> None:
    with forge_system(system, CONFIG) as (forge, _web):
        pull = forge.open_pull("org/app", "fix", "Fix the thing")
        wait_until(lambda: "success" in forge.statuses_of(pull), 90, "the first check", 0.5)
        system.sluice("wait", "--idle", "--timeout", "60")
        bad = pull.to_api(forge.repos)
        for name in ("org/app x", "org/app\x07", "org/.."):
            forge.send("pull_request", {"action": "opened", "pull_request": bad}, name)
        forge.comment(pull, "recheck")
        wait_until(
            lambda: forge.statuses_of(pull).count("success") == 2, 90, "the recheck behind", 0.5
        )
        system.sluice("wait", "--idle", "--timeout", "60")
        # every call is about org/app (or who the connection is: GET /user)
        assert all(p.startswith("/repos/org/app/") or p == "/user" for _, p in forge.calls)
        listed = system.sluice("deliveries")
        assert listed.count("is no GitHub name") == 3, listed
