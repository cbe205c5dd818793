"""The real ``zuul-client`` (PyPI) against ``sluice web``: what Zuul's users already type."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from scheduler.stores.event_state import event_state
from scheduler.zk import paths
from scheduler.zk.client import ZooKeeperClient, connect
from scheduler.zk.event_queue import EventQueue
from tests.e2e.system import CHECK_CONFIG, TENANT_YAML, SluiceSystem
from tests.e2e.test_git_poller import APP as POLLER_APP
from tests.e2e.test_git_poller import CONFIG as POLLER_CONFIG
from tests.e2e.test_git_poller import offsets, polled_once
from tests.e2e.test_nodeset import NODES
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
    assert web.get("/api/tenant/demo/project/app/autohold") == [request]  # Zuul's per project
    assert web.request("GET", "/api/tenant/demo/project/nope/autohold").status == 404
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
    assert "Not Found: Unknown tenant" in out
    for path in (
        "/api/tenant/demo/pipeline/check/project/app/branch/ma%20in/freeze-jobs",
        "/api/tenant/demo/pipeline/ch%20eck/project/app/branch/main/freeze-jobs",
        "/api/tenant/demo/pipeline/check/project/app/branch/main/freeze-job/" + "x" * 300,
    ):
        answer = web.request("GET", path)
        assert answer.status == 400 and "not a valid value" in answer.body["description"], path


# -- manage-events ----------------------------------------------------------------


@pytest.fixture
def polled(web: WebServer) -> Iterator[tuple[SluiceSystem, ZooKeeperClient, str]]:
    """The git poller feeding ``check`` (a ``review/...`` push), and a ZooKeeper client."""
    system = web.system
    text = system.config.read_text()
    system.config.write_text(
        text.replace("    baseurl: repos\n", "    baseurl: repos\n    poll_delay: 1\n")
    )
    system.tenant(TENANT_YAML)
    system.repos.commit("config", "main", POLLER_CONFIG)
    base = system.repos.commit("app", "main", POLLER_APP)
    system.repos.git("app", "checkout", "-q", "--detach")
    system.start_worker(("scheduler", "merger", "executor"), concurrency=2)
    system.start_worker(("maintenance",), concurrency=1)
    system.sluice("reconfigure")
    client = connect(system.environment.zookeeper.settings())
    wait_until(lambda: polled_once(client), 60, "a first poll (offsets, no events)")
    yield system, client, base
    client.stop()
    client.close()


def test_manage_events_pause_resume_and_discard(
    web: WebServer, polled: tuple[SluiceSystem, ZooKeeperClient, str]
) -> None:
    system, client, base = polled
    trigger = EventQueue(client, paths.tenant_trigger_queue("demo"))
    incoming = EventQueue(client, paths.connection_event_queue("local"))

    def push(ref: str) -> str:
        sha = system.repos.commit("app", f"review/{ref}", {f"{ref}.txt": "1\n"}, base=base)
        system.repos.git("app", "checkout", "-q", "--detach")
        return sha

    def results() -> dict[str, str | None]:
        return {b["ref"].removeprefix("refs/heads/"): b["result"] for b in system.buildsets()}

    def ran(ref: str) -> bool:
        return results().get(ref) == "SUCCESS"

    # paused: the trigger event stays queued, and the rest goes on (an enqueue runs)
    zuul_client(web, "manage-events", "--tenant", "demo", "pause-trigger", "--reason", "upgrade")
    state = event_state(client, "demo")
    assert state.trigger_queue_paused and state.reason == "upgrade" and state.by == "alice"
    push("one")
    wait_until(lambda: trigger.length() == 1, 60, "review/one held in the trigger queue")
    zuul_client(web, "enqueue", "--tenant", "demo", "--pipeline", "check",
                "--project", "app", "--change", "main")  # fmt: skip
    wait_until(lambda: ran("main"), 90, "the enqueued change to run", interval=0.5)
    assert trigger.length() == 1 and "review/one" not in results()

    # resumed: the held event is taken
    zuul_client(web, "manage-events", "--tenant", "demo", "normal")
    assert event_state(client, "demo").normal
    wait_until(lambda: ran("review/one"), 90, "review/one to run once resumed", interval=0.5)
    assert trigger.length() == 0

    # discarding: what is queued is dropped (the answer says how many), and what comes
    zuul_client(web, "manage-events", "--tenant", "demo", "pause-trigger")
    push("two")
    wait_until(lambda: trigger.length() == 1, 60, "review/two held in the trigger queue")
    answer = web.request("POST", "/api/tenant/demo/state",
                         {"trigger_queue_discarding": True, "reason": "flood"},
                         auth=token("demo"))  # fmt: skip
    assert answer.status == 200, answer
    assert answer.body["discarded"] == 1 and answer.body["trigger_queue_discarding"] is True
    assert trigger.length() == 0
    zuul_client(web, "manage-events", "--tenant", "demo", "discard-trigger")
    three = push("three")

    def dropped() -> bool:  # polled, moved to the tenant, dropped there
        return (
            three in json.dumps(offsets(client)) and not incoming.length() and not trigger.length()
        )

    wait_until(dropped, 60, "review/three polled and dropped", interval=0.2)
    zuul_client(web, "manage-events", "--all-tenants", "normal")
    push("four")
    wait_until(lambda: ran("review/four"), 90, "review/four to run", interval=0.5)
    assert "review/two" not in results() and "review/three" not in results()

    # paused results: a build's item waits with its results queued until resumed
    zuul_client(web, "manage-events", "--tenant", "demo", "pause-result")
    state = event_state(client, "demo")
    assert state.result_queue_paused and state.trigger_queue_paused
    result_queue = EventQueue(client, paths.pipeline_result_queue("demo", "check"))
    done = len(system.buildsets())
    zuul_client(web, "enqueue", "--tenant", "demo", "--pipeline", "check",
                "--project", "app", "--change", "review/one")  # fmt: skip
    wait_until(lambda: result_queue.length() >= 1, 60, "a result held in the result queue")
    time.sleep(2)
    assert len(system.buildsets()) == done and result_queue.length() >= 1
    zuul_client(web, "manage-events", "--tenant", "demo", "normal")
    wait_until(lambda: len(system.buildsets()) > done, 90, "the item reported once resumed")
    wait_until(lambda: result_queue.length() == 0, 30, "the result queue drained")


def test_manage_events_refuses_what_zuul_refuses(web: WebServer) -> None:
    web.system.tenant(TENANT_YAML)
    web.system.repos.commit("config", "main", POLLER_CONFIG)
    web.system.repos.commit("app", "main", POLLER_APP)
    web.system.start_worker(("scheduler", "merger"), concurrency=1)
    web.system.sluice("reconfigure")
    body = {"trigger_queue_paused": True}
    # no token, a token of another tenant, an unknown tenant
    out = zuul_client(web, "manage-events", "--tenant", "demo", "pause-trigger",
                      admin=False, expect=1)  # fmt: skip
    assert "Auth Token required" in out
    answer = web.request("POST", "/api/tenant/demo/state", body)
    assert answer.status == 401 and answer.headers.get("www-authenticate") == "Bearer"
    out = zuul_client(web, "manage-events", "--tenant", "other", "pause-trigger", expect=1)
    assert "Forbidden: the token does not make its bearer an admin of 'other'" in out
    answer = web.request("POST", "/api/tenant/nope/state", body, auth=token("*"))
    assert answer.status == 404 and answer.body["description"] == "Unknown tenant"
    answer = web.request("POST", "/api/tenant/na%20me/state", body, auth=token("*"))
    assert answer.status == 400 and answer.body["field"] == "tenant"
    # malformed and huge bodies
    for wrong, field in (
        ({"trigger_queue_paused": "maybe"}, "trigger_queue_paused"),
        ({"result_queue_paused": 3}, "result_queue_paused"),
        ({"reason": "x" * 2000}, "reason"),
        ({"reason": "line\nbreak"}, "reason"),
    ):
        answer = web.request("POST", "/api/tenant/demo/state", wrong, auth=token("demo"))
        assert answer.status == 400 and answer.body["field"] == field, (wrong, answer)
    answer = web.request("POST", "/api/tenant/demo/state", [1, 2], auth=token("demo"))
    assert answer.status == 400 and "JSON object" in answer.body["description"]
    answer = web.request("POST", "/api/tenant/demo/state", {"reason": "y" * 70000},
                         auth=token("demo"))  # fmt: skip
    assert answer.status == 413
    # none of it changed anything: the tenant's events flow
    client = connect(web.system.environment.zookeeper.settings())
    try:
        assert event_state(client, "demo").normal
    finally:
        client.stop()
        client.close()
    web.system.enqueue("main")


# -- nodes and nodeset requests -----------------------------------------------------


def _node_app(flag: Path) -> dict[str, str]:
    held = (
        f"#!/bin/sh\nfor i in $(seq 1 1200); do test -e {flag} && exit 0; sleep 0.1; done\nexit 1\n"
    )
    job = """
        - job:
            name: {name}
            run: ci/held.sh
            nodeset:
              nodes:
                - name: n1
                  label: ubuntu
    """
    return {
        ".zuul.yaml": job.format(name="first")
        + job.format(name="second")
        + """
        - project:
            check:
              jobs: [first, second]
        """,
        "ci/held.sh": held,
    }


def test_node_and_nodeset_request_verbs(web: WebServer) -> None:
    system = web.system
    flag = system.root / "release-nodes"
    system.config.write_text(system.config.read_text() + NODES)
    system.tenant(TENANT_YAML)
    system.repos.commit("config", "main", CHECK_CONFIG)
    system.repos.commit("app", "main", _node_app(flag))
    system.start_workers()
    system.start_worker(("launcher",), concurrency=1)
    system.sluice("reconfigure")
    system.enqueue("main")

    def listed(path: str, state: str) -> list[dict[str, Any]]:
        return [r for r in web.get(f"/api/tenant/demo/{path}") if r["state"] == state]

    # one job runs on the node, the other's request waits for it
    (node,) = wait_until(lambda: listed("nodes", "in-use"), 60, "a node in use")
    (waiting,) = wait_until(lambda: listed("nodeset-requests", "requested"), 30, "a request")
    out = zuul_client(web, "node-list", "--tenant", "demo", admin=False)
    assert node["uuid"] in out and "in-use" in out and "hosts" in out and "ubuntu" in out
    out = zuul_client(web, "nodeset-request-list", "--tenant", "demo", admin=False)
    assert waiting["uuid"] in out and "check" in out and waiting["job_name"] in out
    assert waiting["job_name"] in ("first", "second") and waiting["labels"] == ["ubuntu"]

    # a node in use cannot be given back; it can be held, and stays held after its build
    out = zuul_client(web, "node-set-state", "--tenant", "demo", node["uuid"], "used", expect=1)
    assert f"Bad Request: node {node['uuid']} is in-use: only a node hold can be set used" in out
    zuul_client(web, "node-set-state", "--tenant", "demo", node["uuid"], "hold")
    assert listed("nodes", "hold")[0]["uuid"] == node["uuid"]

    # the waiting request deleted: its job ends NODE_FAILURE, the other is not disturbed
    zuul_client(web, "nodeset-request-delete", "--tenant", "demo", waiting["uuid"])
    assert listed("nodeset-requests", "requested") == []
    flag.write_text("go\n")
    system.sluice("wait", "--idle", "--timeout", "120")
    builds = {b["job_name"]: b for b in web.get("/api/tenant/demo/builds")}
    assert builds[waiting["job_name"]]["result"] == "NODE_FAILURE", builds
    assert "deleted by an operator" in builds[waiting["job_name"]]["error_detail"]
    other = "second" if waiting["job_name"] == "first" else "first"
    assert builds[other]["result"] == "SUCCESS", builds
    time.sleep(3)  # three launcher checks: a held node is not deleted
    assert [n["uuid"] for n in listed("nodes", "hold")] == [node["uuid"]]

    # given back: its launcher deletes it
    zuul_client(web, "node-set-state", "--tenant", "demo", node["uuid"], "used")
    wait_until(lambda: web.get("/api/tenant/demo/nodes") == [], 30, "the node deleted")

    # Zuul's refusals: unknown node or request, no token, another tenant, bad values
    out = zuul_client(web, "node-set-state", "--tenant", "demo", "9999999999", "hold", expect=1)
    assert "Not Found: Node not found: '9999999999'" in out
    out = zuul_client(web, "nodeset-request-delete", "--tenant", "demo", "100-0000009999", expect=1)
    assert "Not Found: Nodeset request not found: '100-0000009999'" in out
    out = zuul_client(web, "nodeset-request-delete", "--tenant", "demo", "no such", expect=1)
    assert "Bad Request: path parameter 'request': not a valid value" in out
    out = zuul_client(web, "node-set-state", "--tenant", "demo", "1", "hold", admin=False, expect=1)
    assert "Auth Token required" in out
    out = zuul_client(web, "nodeset-request-delete", "--tenant", "other", "100-1", expect=1)
    assert "Forbidden" in out
    for method, path, body in (
        ("PUT", "/api/tenant/demo/nodes/1", {"state": "hold"}),
        ("DELETE", "/api/tenant/demo/nodeset-requests/100-1", None),
    ):
        answer = web.request(method, path, body)
        assert answer.status == 401, (path, answer)
    answer = web.request(
        "PUT", "/api/tenant/demo/nodes/1", {"state": "deleting"}, auth=token("demo")
    )
    assert answer.status == 400 and answer.body["description"].endswith("one of hold, used")
    answer = web.request("PUT", "/api/tenant/demo/nodes/1", {}, auth=token("demo"))
    assert answer.status == 400 and answer.body["field"] == "state"
    answer = web.request("PUT", "/api/tenant/nope/nodes/1", {"state": "hold"}, auth=token("*"))
    assert answer.status == 404 and answer.body["description"] == "Unknown tenant"
    assert web.request("GET", "/api/tenant/nope/nodeset-requests").status == 404
