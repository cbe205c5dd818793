"""A GitLab that stumbles: a 502 on a hook's read, a 429 on a status; the journey goes on."""

from __future__ import annotations

import time

from tests.e2e.system import SluiceSystem
from tests.fixtures.fake_gitlab import FakeGitLab
from tests.fixtures.waiting import wait_until
from tests.web.test_gitlab_journey import gitlab_web


def stumble(forge: FakeGitLab) -> None:
    forge.fault("GET", r"/merge_requests/1$", 502)
    reset = str(int(time.time()) + 2)
    forge.fault("POST", r"/statuses/", 429, headers={"RateLimit-Reset": reset})


def test_a_502_and_a_rate_limit_delay_the_check_only(system: SluiceSystem) -> None:
    with gitlab_web(system, stumble) as (forge, _):
        mr = forge.open("group/lib", "feature", "Add a feature")
        wait_until(lambda: "success" in forge.statuses_of(mr), 120, "the check's status", 0.5)
        system.sluice("wait", "--idle", "--timeout", "60")
        assert forge.count("GET", r"/merge_requests/1$") == 2  # the 502, then the answer
        assert forge.count("POST", r"/statuses/") == 2  # the 429, then after its reset
        assert forge.statuses_of(mr) == ["success"]
        assert [b["result"] for b in system.buildsets()] == ["SUCCESS"]
