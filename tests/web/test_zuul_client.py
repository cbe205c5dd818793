"""The real ``zuul-client`` (PyPI) against ``sluice web``: what Zuul's users already type."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.system import TENANT_YAML
from tests.fixtures.waiting import wait_until
from tests.web.gates import CONFIG, HeldGate
from tests.web.server import WebServer, token

ZUUL_CLIENT = str(Path(sys.executable).parent / "zuul-client")


def zuul_client(
    web: WebServer, *args: str, admin: bool = True, expect: int = 0, stdin: str = ""
) -> str:
    auth = ["--auth-token", token("demo")] if admin else []
    done = subprocess.run(
        [ZUUL_CLIENT, "--zuul-url", web.url, *auth, *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
        input=stdin,
    )
    assert done.returncode == expect, (args, done.stdout, done.stderr)
    return done.stdout + done.stderr


@pytest.fixture
def gate(web: WebServer) -> HeldGate:
    held = HeldGate(web.system)
    for ref in ("c1", "c2", "c3"):
        held.change(ref)
    web.system.start_worker(concurrency=4)
    web.system.sluice("reconfigure")
    return held


def gate_order(web: WebServer) -> list[str]:
    status = web.get("/api/tenant/demo/status")
    (gate,) = [p for p in status["pipelines"] if p["name"] == "gate"]
    return [item["ref"] for q in gate["change_queues"] for head in q["heads"] for item in head]


def test_enqueue_promote_dequeue_and_builds(web: WebServer, gate: HeldGate) -> None:
    for ref in ("c1", "c2", "c3"):
        zuul_client(web, "enqueue", "--tenant", "demo", "--pipeline", "gate",
                    "--project", "app", "--change", ref)  # fmt: skip
    assert gate_order(web) == ["c1", "c2", "c3"]

    zuul_client(web, "promote", "--tenant", "demo", "--pipeline", "gate", "--changes", "c3")
    assert gate_order(web) == ["c3", "c1", "c2"]

    zuul_client(web, "dequeue", "--tenant", "demo", "--pipeline", "gate",
                "--project", "app", "--change", "c1")  # fmt: skip
    # the dequeued item leaves once its report (DEQUEUED) has landed
    wait_until(lambda: gate_order(web) == ["c3", "c2"], 30, "c1 out of the gate")

    gate.release()
    web.system.sluice("wait", "--idle", "--timeout", "120")
    results = {b["ref"]: b["result"] for b in web.get("/api/tenant/demo/buildsets")}
    assert results["c3"] == "SUCCESS" and results["c2"] == "SUCCESS"
    assert results.get("c1") in (None, "DEQUEUED")

    out = zuul_client(web, "builds", "--tenant", "demo", "--project", "app", admin=False)
    assert "unit" in out and "gate" in out and "SUCCESS" in out
    out = zuul_client(web, "--format", "json", "builds", "--tenant", "demo", "--result",
                      "SUCCESS", admin=False)  # fmt: skip
    assert out.count('"job_name": "unit"') >= 2

    uuid = web.get("/api/tenant/demo/builds?result=SUCCESS")[0]["uuid"]
    out = zuul_client(web, "build-info", "--tenant", "demo", "--uuid", uuid, admin=False)
    assert uuid in out and "SUCCESS" in out
    out = zuul_client(web, "build-info", "--tenant", "demo", "--uuid", "0" * 32,
                      admin=False, expect=1)  # fmt: skip
    assert "Not Found: no build '00000000000000000000000000000000'" in out


def test_enqueue_ref_and_errors(web: WebServer, gate: HeldGate) -> None:
    gate.release()
    commit = web.system.repos.git("app", "rev-parse", "c2")
    zuul_client(web, "enqueue-ref", "--tenant", "demo", "--pipeline", "check",
                "--project", "app", "--ref", "refs/heads/main", "--newrev", commit)  # fmt: skip
    web.system.sluice("wait", "--idle", "--timeout", "120")
    (buildset,) = web.get("/api/tenant/demo/buildsets")
    assert buildset["newrev"] == commit or buildset["ref"] == commit

    out = zuul_client(web, "enqueue", "--tenant", "demo", "--pipeline", "nope",
                      "--project", "app", "--change", "c1", expect=1)  # fmt: skip
    assert "no pipeline 'nope'" in out
    out = zuul_client(web, "enqueue", "--tenant", "demo", "--pipeline", "gate",
                      "--project", "app", "--change", "c1", admin=False, expect=1)  # fmt: skip
    assert "Auth" in out or "token" in out.lower()

    out = zuul_client(web, "encrypt", "--tenant", "demo", "--project", "app",
                      "--secret-name", "db", "--field-name", "password", admin=False,
                      stdin="hunter2")  # fmt: skip
    assert "name: db" in out and "password: !encrypted/pkcs1-oaep" in out


def test_autohold(web: WebServer, gate: HeldGate) -> None:
    zuul_client(web, "autohold", "--tenant", "demo", "--project", "app", "--job", "unit",
                "--change", "c1", "--reason", "debug the flake", "--count", "2")  # fmt: skip
    out = zuul_client(web, "autohold-list", "--tenant", "demo", admin=False)
    assert "debug the flake" in out and "unit" in out
    (request,) = web.get("/api/tenant/demo/autohold")
    assert request["max_count"] == 2 and request["ref_filter"] == "^c1$"
    out = zuul_client(web, "autohold-info", "--tenant", "demo", request["id"], admin=False)
    assert "debug the flake" in out
    zuul_client(web, "autohold-delete", "--tenant", "demo", request["id"])
    wait_until(lambda: web.get("/api/tenant/demo/autohold") == [], 10, "the request gone")


# -- job-graph and freeze-job ----------------------------------------------------

GRAPH_APP = {
    ".zuul.yaml": """
        - job:
            name: lint
            run: ci/lint.sh
        - job:
            name: unit
            run: ci/unit.sh
            vars: {python: "3.11"}
        - job:
            name: docs
            run: ci/docs.sh
        - project:
            check:
              jobs:
                - lint
                - unit:
                    dependencies: [{name: lint, soft: true}]
                - docs:
                    dependencies: [unit]
        """,
    "ci/lint.sh": "#!/bin/sh\n",
    "ci/unit.sh": "#!/bin/sh\n",
    "ci/docs.sh": "#!/bin/sh\n",
}

GRAPH = ("--tenant", "demo", "--pipeline", "check", "--project", "app", "--branch", "main")


def test_job_graph_and_freeze_job(web: WebServer) -> None:
    system = web.system
    system.tenant(TENANT_YAML)
    system.repos.commit("config", "main", CONFIG)
    system.repos.commit("app", "main", GRAPH_APP)
    system.start_worker(("scheduler", "merger"), concurrency=2)
    system.sluice("reconfigure")

    out = zuul_client(web, "--format", "json", "job-graph", *GRAPH, admin=False)
    assert json.loads(out) == [
        {"name": "lint", "dependencies": []},
        {"name": "unit", "dependencies": [{"name": "lint", "soft": True}]},
        {"name": "docs", "dependencies": [{"name": "unit", "soft": False}]},
    ]
    out = zuul_client(web, "job-graph", *GRAPH, admin=False)
    assert "lint (soft)" in out and "| docs" in out
    out = zuul_client(web, "--format", "dot", "job-graph", *GRAPH, admin=False)
    assert '"lint" -> "unit" [style=dashed dir=back];' in out
    assert '"unit" -> "docs" [dir=back];' in out

    out = zuul_client(web, "freeze-job", *GRAPH, "--job", "unit", admin=False)
    assert "Job: unit\nBranch: main\n" in out and "Timeout: 300" in out
    assert "Run Playbooks:\n  local:app:ci/unit.sh@main\n" in out
    assert "'python': '3.11'" in out
    frozen = web.get("/api/tenant/demo/pipeline/check/project/app/branch/main/freeze-job/docs")
    assert frozen["dependencies"] == [{"name": "unit", "soft": False}]
    assert frozen["nodeset"]["nodes"] == [] and frozen["playbooks"][0]["trusted"] is False

    # Zuul's messages, and nothing frozen
    out = zuul_client(web, "freeze-job", *GRAPH, "--job", "nope", admin=False, expect=1)
    assert "Not Found: Unknown job: 'nope'" in out
    wrong = list(GRAPH)
    wrong[3] = "nope"
    out = zuul_client(web, "job-graph", *wrong, admin=False, expect=1)
    assert "Not Found: Unknown pipeline: 'nope'" in out
    wrong = list(GRAPH)
    wrong[5] = "nope"
    out = zuul_client(web, "freeze-job", *wrong, "--job", "unit", admin=False, expect=1)
    assert "Not Found: Unknown project: 'nope'" in out
    wrong = list(GRAPH)
    wrong[1] = "nope"
    out = zuul_client(web, "job-graph", *wrong, admin=False, expect=1)
    assert "Not Found: no tenant 'nope'" in out
    for path in (
        "/api/tenant/demo/pipeline/check/project/app/branch/ma%20in/freeze-jobs",
        "/api/tenant/demo/pipeline/ch%20eck/project/app/branch/main/freeze-jobs",
        "/api/tenant/demo/pipeline/check/project/app/branch/main/freeze-job/" + "x" * 300,
    ):
        answer = web.request("GET", path)
        assert answer.status == 400 and "not a valid value" in answer.body["description"], path
