"""Every reporter action of a Zuul pipeline, seen on a fake GitHub, on real workers.

``enqueue``, ``start``, ``success``, ``failure``, ``merge-conflict`` (under
Zuul's older name ``merge-failure``), ``config-error``, ``no-jobs`` and
``dequeue`` each fire at Zuul's moment with the pipeline's ``*-message``
and ``footer-message``; a new patchset dequeues the old item
(``dequeue-on-new-patchset``) or keeps it; ``disable-after-consecutive-failures``
disables a pipeline (its ``disabled`` reporters only), a reconfiguration
keeps it disabled and a success enables it again (on GitHub, and with the
git driver through ``sluice status``); GitLab hears ``enqueue``, ``start``
and ``success`` with its labels.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from tests.e2e.system import TENANT_YAML, SluiceSystem
from tests.fixtures.fake_github import FakeGitHub, Pull
from tests.fixtures.waiting import wait_until
from tests.web.test_github_journey import forge_system
from tests.web.test_gitlab_journey import CONFIG as GITLAB_CONFIG
from tests.web.test_gitlab_journey import gitlab_web

TRIGGER = """
            trigger:
              github:
                - event: pull_request
                  action: [opened, changed]
"""
JOBS = """
        - pipeline:
            name: gate
            manager: dependent
            trigger: {}
        - job:
            name: base
            parent: null
            timeout: 60
        - job:
            name: unit
            run: ci/unit.sh
            files: ['^src/']
        """
# fails when the change adds src/bad.py; waits for a flag when it adds src/slow.py
UNIT = "#!/bin/sh\ntest -e src/slow.py && while ! test -e {flag}; do sleep 0.1; done\n"
UNIT += "test ! -e src/bad.py\n"
ACTIONS = (
    """
        - pipeline:
            name: check
            manager: independent
            dequeue-on-new-patchset: {dequeue}"""
    + TRIGGER
    + """
            enqueue:
              github: {comment: true}
            start:
              github: {status: pending}
            success:
              github: {status: success, label: [passed], unlabel: failed}
            failure:
              github: {status: failure, label: failed, unlabel: [passed]}
            merge-failure:
              github: {status: error}
            config-error:
              github: {status: error}
            no-jobs:
              github: {comment: true}
            dequeue:
              github: {comment: true}
            enqueue-message: Queued for check.
            merge-failure-message: Rebase it, please.
            no-jobs-message: Nothing to run here.
            dequeue-message: Cancelled.
            footer-message: -- the Sluice bot
    """
    + JOBS
)
DISABLE = (
    """
        - pipeline:
            name: check
            manager: independent
            disable-after-consecutive-failures: 2"""
    + TRIGGER
    + """
            start:
              github: {status: pending}
            success:
              github: {status: success}
            failure:
              github: {status: failure}
            disabled:
              github: {comment: true}
            footer-message: {footer}
    """
    + JOBS
)


def config(text: str, flag: str) -> dict[str, str]:
    return {"zuul.d/pipelines.yaml": text, "ci/unit.sh": UNIT.replace("{flag}", flag)}


def pull_of(system: SluiceSystem, forge: FakeGitHub, name: str, files: dict[str, str]) -> Pull:
    base = system.repos.git("org/app", "rev-parse", "main")
    system.repos.commit("org/app", name, files, base=base)
    system.repos.git("org/app", "checkout", "-q", "--detach")
    return forge.open_pull("org/app", name, name)


def comments(forge: FakeGitHub, pull: Pull) -> list[str]:
    return [c["body"] for c in forge.comments if c["number"] == pull.number]


def statuses(forge: FakeGitHub, pull: Pull) -> list[dict[str, Any]]:
    sha = pull.sha(forge.repos)
    return [s for s in forge.statuses if s["sha"] == sha]


def waited(what: str, check: Callable[[], object]) -> None:
    wait_until(check, 90, what, 0.3)


def test_each_reporter_action_fires_with_its_message(system: SluiceSystem) -> None:
    flag = system.root / "release"
    text = ACTIONS.replace("{dequeue}", "true")
    with forge_system(system, config(text, str(flag))) as (forge, _web):
        good = forge.open_pull("org/app", "fix", "Fix")  # the journey's branch: src/fix.py
        waited("success", lambda: "success" in forge.statuses_of(good))
        assert forge.statuses_of(good) == ["pending", "success"]  # start:, then success:
        (success,) = [s for s in statuses(forge, good) if s["state"] == "success"]
        assert success["description"] == "Build succeeded (demo/check)."
        waited("the success comment", lambda: len(comments(forge, good)) == 2)
        queued, passed = comments(forge, good)  # enqueue:, then success: (comment by default)
        assert queued == "Queued for check."
        assert passed == "Build succeeded (demo/check).\n\n- unit: SUCCESS\n\n-- the Sluice bot"

        assert good.labels == ["passed"]  # success: label

        bad = pull_of(system, forge, "bad", {"src/bad.py": "x\n"})
        bad.labels.append("passed")  # as if it had passed before
        waited("failure", lambda: "failure" in forge.statuses_of(bad))
        assert forge.statuses_of(bad) == ["pending", "failure"]
        waited("the failure's labels", lambda: bad.labels == ["failed"])  # label, unlabel

        docs = pull_of(system, forge, "docs", {"doc/readme.md": "x\n"})
        waited("no-jobs", lambda: len(comments(forge, docs)) == 2)
        queued, nothing = comments(forge, docs)
        assert queued == "Queued for check."
        assert nothing.startswith("Nothing to run here.") and nothing.endswith("-- the Sluice bot")
        assert forge.statuses_of(docs) == ["pending"]  # started, then no jobs: no status

        broken = pull_of(system, forge, "broken", {".zuul.yaml": "- job: {name: x, nonsense: 1}\n"})
        waited("config-error", lambda: "error" in forge.statuses_of(broken))
        (error,) = [s for s in statuses(forge, broken) if s["state"] == "error"]
        assert error["description"] == "Build failed (demo/check)."

        base = system.repos.git("org/app", "rev-parse", "main")
        system.repos.commit("org/app", "conflict", {"src/app.py": "value = 2\n"}, base=base)
        system.repos.commit("org/app", "main", {"src/app.py": "value = 3\n"})
        system.repos.git("org/app", "checkout", "-q", "--detach")
        conflict = forge.open_pull("org/app", "conflict", "conflict")
        waited("merge-conflict", lambda: "error" in forge.statuses_of(conflict))
        (error,) = [s for s in statuses(forge, conflict) if s["state"] == "error"]
        assert error["description"] == "Rebase it, please."

        slow = pull_of(system, forge, "slow", {"src/slow.py": "x\n"})
        waited("the slow change started", lambda: "pending" in forge.statuses_of(slow))
        forge.push(slow, {"src/slow.py": "y\n"})  # a new patchset: the old item leaves
        waited("dequeue", lambda: any(c.startswith("Cancelled.") for c in comments(forge, slow)))
        (dequeued,) = [c for c in comments(forge, slow) if c.startswith("Cancelled.")]
        assert "superseded by a new patchset" in dequeued and dequeued.endswith("-- the Sluice bot")
        flag.write_text("go\n")
        waited("the new patchset", lambda: "success" in forge.statuses_of(slow))
        system.sluice("wait", "--idle", "--timeout", "60")
        results = sorted(b["result"] for b in system.buildsets())
        assert results.count("DEQUEUED") == 2  # the old patchset, and no jobs (reported)
        assert forge.unauthorized == 0


def test_a_new_patchset_keeps_the_old_item_without_dequeue_on_new_patchset(
    system: SluiceSystem,
) -> None:
    flag = system.root / "release"
    text = ACTIONS.replace("{dequeue}", "false")
    with forge_system(system, config(text, str(flag))) as (forge, _web):
        slow = pull_of(system, forge, "slow", {"src/slow.py": "x\n"})
        waited("started", lambda: "pending" in forge.statuses_of(slow))
        first = slow.sha(system.repos)
        forge.push(slow, {"src/slow.py": "y\n"})
        waited("the second started", lambda: "pending" in forge.statuses_of(slow))
        flag.write_text("go\n")
        system.sluice("wait", "--idle", "--timeout", "90")
        both = [s["state"] for s in forge.statuses if s["state"] != "pending"]
        assert both == ["success", "success"]  # each patchset ran to its end
        assert {s["sha"] for s in forge.statuses if s["state"] == "success"} == {
            first,
            slow.sha(system.repos),
        }
        assert not [c for c in comments(forge, slow) if c.startswith("Cancelled.")]


def test_consecutive_failures_disable_the_pipeline_until_a_success(system: SluiceSystem) -> None:
    flag = system.root / "unused"
    text = DISABLE.replace("{footer}", "one")
    with forge_system(system, config(text, str(flag))) as (forge, _web):

        def fail(name: str) -> Pull:
            pull = pull_of(system, forge, name, {"src/bad.py": name})
            system.sluice("wait", "--idle", "--timeout", "60")
            return pull

        one, two = fail("one"), fail("two")
        # the report that reaches the limit is made as usual
        assert (forge.statuses_of(one), forge.statuses_of(two)) == (["pending", "failure"],) * 2
        three = fail("three")
        # disabled: no start, no failure status; the disabled reporter's comment
        assert forge.statuses_of(three) == []
        (said,) = comments(forge, three)
        assert said.startswith("Build failed (demo/check).") and said.endswith("one")

        # a reconfiguration (the config project changed) keeps it disabled
        system.repos.commit(
            "config", "main", {"zuul.d/pipelines.yaml": DISABLE.replace("{footer}", "two")}
        )
        system.sluice("reconfigure")
        four = fail("four")
        assert forge.statuses_of(four) == []
        assert comments(forge, four)[0].endswith("two")

        fixed = pull_of(system, forge, "fixed", {"src/ok.py": "x\n"})
        system.sluice("wait", "--idle", "--timeout", "60")
        assert forge.statuses_of(fixed) == []  # reported as disabled, and it enables it
        assert comments(forge, fixed)[0].startswith("Build succeeded (demo/check).")
        five = fail("five")
        assert forge.statuses_of(five) == ["pending", "failure"]  # enabled again
        assert len(comments(forge, five)) == 1  # the failure reporter's (comment by default)


GIT_CONFIG = {
    "zuul.d/base.yaml": """
        - pipeline:
            name: check
            manager: independent
            trigger: {}
            disable-after-consecutive-failures: 2
            success:
              local: {}
            failure:
              local: {}
            disabled:
              local: {}
        - job:
            name: base
            parent: null
            timeout: 60
        """,
}
GIT_APP = {
    ".zuul.yaml": "- job: {name: unit, run: ci/unit.sh}\n- project: {check: {jobs: [unit]}}\n",
    "ci/unit.sh": "#!/bin/sh\ntest ! -e bad\n",
}


def test_the_git_driver_disables_and_enables_a_pipeline(system: SluiceSystem) -> None:
    system.tenant(TENANT_YAML)
    system.repos.commit("config", "main", GIT_CONFIG)
    base = system.repos.commit("app", "main", GIT_APP)
    for name in ("one", "two", "three"):
        system.repos.commit("app", name, {"bad": name}, base=base)
    system.repos.commit("app", "good", {"good": "x\n"}, base=base)
    system.start_workers()
    system.sluice("reconfigure")

    def check() -> dict[str, Any]:
        document = json.loads(system.sluice("status", "--json", "--tenant", "demo"))
        (found,) = [p for p in document["tenants"][0]["pipelines"] if p["name"] == "check"]
        return dict(found)

    seen, said = [], []
    for name in ("one", "two", "three", "good"):
        system.enqueue(name)
        system.sluice("wait", "--idle", "--timeout", "60")
        found = check()
        seen.append((found.get("disabled", False), found.get("consecutive_failures", 0)))
        said.append(system.sluice("status", "--tenant", "demo").splitlines()[1].strip())
    assert seen == [(False, 1), (True, 2), (True, 3), (False, 0)]
    assert said[2] == "pipeline check: 0 item(s) (disabled: 3 failures in a row)"
    assert said[3] == "pipeline check: 0 item(s)"  # enabled again by the success
    results = sorted(b["result"] for b in system.buildsets())
    assert results == ["FAILURE", "FAILURE", "FAILURE", "SUCCESS"]  # the history is kept


def test_gitlab_hears_enqueue_start_success_and_its_labels(system: SluiceSystem) -> None:
    text = GITLAB_CONFIG["zuul.d/pipelines.yaml"]
    text = text.replace(
        "            success:\n              gitlab: {status: success, comment: true}\n",
        "            enqueue:\n              gitlab: {comment: true}\n"
        "            start:\n              gitlab: {status: pending}\n"
        "            success:\n"
        "              gitlab: {status: success, label: passed, unlabel: [failed]}\n"
        "            enqueue-message: Queued.\n"
        "            footer-message: -- the bot\n",
    )
    with gitlab_web(system, config={**GITLAB_CONFIG, "zuul.d/pipelines.yaml": text}) as (
        forge,
        _web,
    ):
        mr = forge.open("group/lib", "feature", "Add a feature")
        mr.labels.append("failed")
        waited("success", lambda: "success" in forge.statuses_of(mr))
        assert forge.statuses_of(mr) == ["pending", "success"]
        waited("the labels", lambda: mr.labels == ["passed"])
        notes = [n["body"] for n in forge.notes if n["iid"] == mr.iid]
        assert notes[0] == "Queued."
        assert notes[1].startswith("Build succeeded (demo/check).")
        assert notes[1].endswith("-- the bot")
