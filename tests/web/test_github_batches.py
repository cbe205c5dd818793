"""A batched gate through a fake GitHub on real workers: four pull requests, one culprit."""

from __future__ import annotations

from tests.e2e.system import SluiceSystem
from tests.fixtures.waiting import wait_until
from tests.web.test_github_gate_order import gate_comments, ready
from tests.web.test_github_journey import CONFIG, forge_system

BATCHED = dict(CONFIG)
BATCHED["zuul.d/pipelines.yaml"] = (
    CONFIG["zuul.d/pipelines.yaml"]
    .replace(
        "            name: gate\n            manager: dependent\n",
        "            name: gate\n            manager: dependent\n"
        "            batch: {size: 4, max-wait: 60}\n",
    )
    .replace("                status: ['demo/check:success']\n", "")
)
# a pull request fails the gate by adding a file named FAIL
BATCHED["ci/unit.sh"] = "#!/bin/sh\ntest ! -e FAIL\n"


def test_a_batch_of_four_pull_requests_merges_three_in_order_and_names_the_culprit(
    system: SluiceSystem,
) -> None:
    assert "batch: {size: 4" in BATCHED["zuul.d/pipelines.yaml"]
    with forge_system(system, BATCHED) as (forge, _web):
        base = system.repos.git("org/app", "rev-parse", "main")
        for n in range(1, 5):
            files = {f"src/p{n}.py": f"{n}\n", **({"FAIL": "x\n"} if n == 3 else {})}
            system.repos.commit("org/app", f"p{n}", files, base=base)
        system.repos.git("org/app", "checkout", "-q", "--detach")
        pulls = [forge.open_pull("org/app", f"p{n}", f"Change {n}") for n in range(1, 5)]
        system.sluice("wait", "--idle", "--timeout", "90")
        for pull in pulls:
            ready(forge, pull)
        wait_until(lambda: len(forge.merges) == 3, 120, "three merged", 0.5)
        system.sluice("wait", "--idle", "--timeout", "90")

        assert [m["number"] for m in forge.merges] == [1, 2, 4]
        (said,) = [c for c in gate_comments(forge, pulls[2]) if "culprit" in c]
        assert "failed" in said.lower()
        gates = {b["ref"]: b["result"] for b in system.buildsets() if b["pipeline"] == "gate"}
        assert gates == {
            "refs/pull/1/head": "SUCCESS",
            "refs/pull/2/head": "SUCCESS",
            "refs/pull/3/head": "FAILURE",
            "refs/pull/4/head": "SUCCESS",
        }
