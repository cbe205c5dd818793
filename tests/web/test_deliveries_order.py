"""Webhooks as GitHub really delivers them: twice, late, out of order.

On real workers behind a real ``sluice web``, with a fake GitHub whose
pull requests change without telling (their webhooks are sent by hand):

* the same delivery id twice is stored once (the second is answered
  ``duplicate``) and checks once;
* ``synchronize`` delivered before ``opened`` for a new pull request: the
  change is checked once, at its latest head;
* a late ``opened`` for a pull request whose head moved since: checked at
  the current head, since translation reads the pull request's state now.

Jobs wait for a flag until every delivery has been moved, so the three
pull requests are in ``check`` together and none is checked twice by
finishing before its second event arrives.
"""

from __future__ import annotations

from typing import Any

from scheduler.views.idle import pending_work
from scheduler.zk.client import connect
from scheduler.zk.event_queue import EventQueue
from scheduler.zk.paths import pipeline_management_queue as management_queue
from scheduler.zk.paths import pipeline_trigger_queue as trigger_queue
from tests.e2e.system import SluiceSystem
from tests.fixtures.fake_github import Pull
from tests.fixtures.waiting import wait_until
from tests.web.test_deliveries import CONFIG, Forges, branch, forges, pull_event, silent_pull


def held_config(system: SluiceSystem) -> dict[str, str]:
    flag = system.root / "release"
    script = f"#!/bin/sh\nfor i in $(seq 1 600); do test -e {flag} && exit 0; sleep 0.1; done\n"
    return {**CONFIG, "ci/unit.sh": script + "exit 1\n"}


def move_head(sites: Forges, pull: Pull) -> str:
    """A new commit on the pull request's branch that GitHub does not announce; its sha."""
    repos = sites.system.repos
    repos.commit("org/app", pull.branch, {f"src/{pull.branch}-2.py": "x = 2\n"})
    repos.git("org/app", "checkout", "-q", "--detach")
    sites.github.point_ref("org/app", pull.branch, f"refs/pull/{pull.number}/head")
    return pull.sha(repos)


def check_items(sites: Forges) -> list[dict[str, Any]]:
    status = sites.web.get("/api/tenant/demo/status")
    (check,) = [p for p in status["pipelines"] if p["name"] == "check"]
    return [i for q in check["change_queues"] for h in q["heads"] for i in h]


def test_twice_late_and_out_of_order_deliveries_check_each_change_once_at_its_head(
    system: SluiceSystem,
) -> None:
    with forges(system, config=held_config(system)) as sites:
        github = sites.github
        for name in ("late", "early"):
            branch(sites, name)
        twice, late, early = (
            silent_pull(github, 1),
            silent_pull(github, 2, "late"),
            silent_pull(github, 3, "early"),
        )
        late_first, early_first = late.sha(system.repos), early.sha(system.repos)
        late_head, early_head = move_head(sites, late), move_head(sites, early)

        opened = pull_event(twice, "opened", twice.sha(system.repos))
        assert sites.post("github", "pull_request", opened, "twice-1")["status"] == "stored"
        assert sites.post("github", "pull_request", opened, "twice-1")["status"] == "duplicate"
        sites.post("github", "pull_request", pull_event(early, "synchronize", early_head))
        sites.post("github", "pull_request", pull_event(early, "opened", early_first))
        sites.post("github", "pull_request", pull_event(late, "opened", late_first))

        client = connect(system.environment.zookeeper.settings())
        try:
            seen: list[Any] = []

            def all_moved() -> bool:  # every delivery reached the pipeline, three items in it
                moving = [w for w in pending_work(client) if w.startswith("events of")]
                for root in (trigger_queue("demo", "check"), management_queue("demo", "check")):
                    moving += [root] * EventQueue(client, root).length()
                seen[:] = [moving, [(i["id"], i["commit"]) for i in check_items(sites)]]
                return not moving and len(seen[1]) == 3

            try:
                wait_until(all_moved, 60, "the deliveries moved into check", 0.3)
            except AssertionError:
                print("last seen:", seen)
                raise
        finally:
            client.stop()
            client.close()
        (system.root / "release").write_text("go\n")
        sites.quiet()

        buildsets = system.buildsets()
        assert sorted((b["change"], b["newrev"], b["result"]) for b in buildsets) == [
            ("refs/pull/1/head", twice.sha(system.repos), "SUCCESS"),
            ("refs/pull/2/head", late_head, "SUCCESS"),
            ("refs/pull/3/head", early_head, "SUCCESS"),
        ]
        assert github.statuses_of(late) == ["success"]  # at the current head only
        assert [s["sha"] for s in github.statuses if s["sha"] in (late_first, early_first)] == []
        assert sites.rows() == []  # nothing set aside
