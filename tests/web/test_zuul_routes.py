"""Zuul's REST routes that Sluice's dashboard and tools read, over a live ``sluice web``.

Build times, badges, semaphores, labels, nodes, project SSH keys and the
token's authorizations, each with Zuul's fields, its filters and its
refusals (Zuul's 404 words for an unknown tenant or project, a 400 naming
a bad parameter); a build's ``log_url`` is the web's URL of its log folder,
so the real ``zuul-client build-info`` reads the job's output, artifacts
and inventory through it.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import yaml
from cryptography.hazmat.primitives.serialization import load_ssh_public_key

from scheduler.stores.node_records import NodeRequestState, PipelineRequestor
from scheduler.stores.nodes import NodeStore
from scheduler.zk.client import ZooKeeperClient
from tests.e2e.system import SluiceSystem
from tests.e2e.test_check_pipeline import prepare_check
from tests.e2e.test_launcher import _configure as configure_nodes
from tests.e2e.test_launcher import client  # noqa: F401 (a fixture)
from tests.fixtures.waiting import wait_until
from tests.web.gates import HeldGate
from tests.web.server import WEB_CONFIG, WebServer, start_web, token
from tests.web.test_api import ran_check
from tests.web.test_read_scopes import protected  # noqa: F401 (a fixture)

ZUUL_CLIENT = str(Path(sys.executable).parent / "zuul-client")


def zuul_client(web: WebServer, *args: str) -> str:
    done = subprocess.run(
        [ZUUL_CLIENT, "--zuul-url", web.url, *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, (args, done.stdout, done.stderr)
    return done.stdout


def refused(web: WebServer, path: str, status: int, **options: Any) -> dict[str, Any]:
    answer = web.request("GET", path, **options)
    assert answer.status == status, (path, answer)
    assert isinstance(answer.body, dict) and answer.body["description"], (path, answer)
    return dict(answer.body)


def test_build_times_badges_and_log_urls(web: WebServer) -> None:
    ran_check(web)
    base = "/api/tenant/demo"

    # build times: finished builds, Zuul's fields, latest end first
    times = web.get(f"{base}/build-times")
    assert {t["job_name"]: t["result"] for t in times} == {
        "lint": "SUCCESS",
        "unit": "SUCCESS",
        "experimental": "FAILURE",
    }
    fields = {"uuid", "job_name", "result", "start_time", "end_time", "duration", "final"}
    assert all(fields | {"project", "branch", "pipeline", "ref"} <= set(t) for t in times)
    assert [t["end_time"] for t in times] == sorted((t["end_time"] for t in times), reverse=True)
    assert all(t["duration"] >= 0 and t["final"] is True for t in times)
    assert times[0]["project"] == "app" and times[0]["pipeline"] == "check"

    def jobs(query: str) -> list[str]:
        return sorted(t["job_name"] for t in web.get(f"{base}/build-times?{query}"))

    assert jobs("job_name=unit") == ["unit"]
    assert jobs("result=FAILURE") == ["experimental"]
    assert jobs("exclude_result=FAILURE") == ["lint", "unit"]
    assert jobs("project=app&pipeline=check&branch=main&final=true") == [
        "experimental",
        "lint",
        "unit",
    ]
    assert jobs("final=false") == [] and jobs("project=config") == []
    assert jobs("pipeline=gate") == []
    assert len(jobs("limit=1")) == 1 and len(jobs("limit=2&skip=2")) == 1
    assert jobs("start_time=2000-01-01T00:00:00Z&end_time=2999-01-01") == [
        "experimental",
        "lint",
        "unit",
    ]
    assert jobs("start_time=2999-01-01T00:00:00") == []
    assert jobs("end_time=2000-01-01%2000:00") == []
    for query, field in {
        "start_time=yesterday": "start_time",
        "end_time=2024-13-45": "end_time",
        "start_time=2024-01-01T25:00:00": "start_time",
        "result=GREAT": "result",
        "exclude_result=NOPE": "exclude_result",
        "limit=0": "limit",
        "skip=-1": "skip",
        "final=maybe": "final",
        "project=a%20b": "project",
        "job_name=" + "x" * 300: "job_name",
        "colour=red": "colour",
        "job_name=a&job_name=b": "job_name",
    }.items():
        body = refused(web, f"{base}/build-times?{query}", 400)
        assert body["field"] == field, (query, body)
    assert refused(web, "/api/tenant/nope/build-times", 404)["description"] == "Unknown tenant"

    # badges: the latest reported buildset, not cached
    passing = web.request("GET", f"{base}/badge?project=app&pipeline=check&branch=main")
    assert passing.status == 200 and passing.headers["content-type"] == "image/svg+xml"
    assert "passing" in passing.body and "<svg" in passing.body
    assert passing.headers["cache-control"] == "no-cache"
    assert "passing" in web.request("GET", f"{base}/badge").body
    unknown = web.request("GET", f"{base}/badge?pipeline=gate")
    assert unknown.status == 404 and "unknown" in unknown.body
    assert refused(web, f"{base}/badge?project=nope", 404)["description"] == "Unknown project"
    assert refused(web, f"{base}/badge?project=no%20pe", 400)["field"] == "project"
    assert refused(web, f"{base}/badge?branch={'b' * 5000}", 400)["field"] == "branch"
    assert refused(web, f"{base}/badge?pipeline=../gate", 400)["field"] == "pipeline"
    assert refused(web, "/api/tenant/nope/badge", 404)["description"] == "Unknown tenant"

    # a build's log_url is the web's folder of its logs: Zuul's clients join names to it
    lint = next(b for b in web.get(f"{base}/builds") if b["job_name"] == "lint")
    assert lint["log_url"] == f"{web.url}{base}/build/{lint['uuid']}/log/"
    assert lint["artifacts"] == [] and lint["provides"] == []
    assert web.get(f"{base}/build/{lint['uuid']}")["log_url"] == lint["log_url"]
    (buildset,) = web.get(f"{base}/buildsets")
    full = web.get(f"{base}/buildset/{buildset['uuid']}")
    assert all(b["log_url"].endswith(f"/build/{b['uuid']}/log/") for b in full["builds"])
    output = httpx.get(lint["log_url"] + "job-output.txt", timeout=10)
    assert output.status_code == 200 and "linting" in output.text
    assert output.headers["x-content-type-options"] == "nosniff"
    inventory = yaml.safe_load(httpx.get(lint["log_url"] + "zuul-info/inventory.yaml").text)
    zuul = inventory["all"]["vars"]["zuul"]
    assert (zuul["build"], zuul["job"], zuul["tenant"]) == (lint["uuid"], "lint", "demo")
    assert zuul["project"]["name"] == "app" and zuul["pipeline"] == "check"
    log = f"{base}/build/{lint['uuid']}/log/"
    assert refused(web, log + "nothing.txt", 404)["field"] == "path"
    for hostile in ("..%2F..%2Fetc%2Fpasswd", ".hidden", "a%20b.txt", "x%00.txt", "a//b"):
        answer = web.request("GET", log + hostile)
        assert answer.status in (400, 404), (hostile, answer)
        assert "root:" not in str(answer.body)
    assert web.request("GET", f"{base}/build/0123456789abcdef/log/job-output.txt").status == 404
    assert web.request("GET", f"/api/tenant/nope/build/{lint['uuid']}/log/x.txt").status == 404

    # the real zuul-client reads the build, its output, artifacts and inventory through it
    args = ("build-info", "--tenant", "demo", "--uuid", lint["uuid"])
    assert "linting" in zuul_client(web, *args, "--show-job-output")
    info = zuul_client(web, *args)
    assert lint["uuid"] in info and "lint" in info
    zuul_client(web, *args, "--show-artifacts")  # none recorded: an empty table
    shown = zuul_client(web, *args, "--show-inventory")
    assert lint["uuid"] in shown and "error" not in shown

    # a failing check makes the badge fail
    system = web.system
    main = system.repos.git("app", "rev-parse", "main").strip()
    system.repos.commit("app", "broken", {"README": "no feature\n"}, base=main)
    system.enqueue("broken")
    system.sluice("wait", "--idle", "--timeout", "90")
    failing = web.request("GET", f"{base}/badge?project=app")
    assert failing.status == 200 and "failing" in failing.body
    assert jobs("result=FAILURE") == ["experimental", "experimental", "unit"]


SEMAPHORES = {
    "zuul.d/semaphores.yaml": """
        - semaphore:
            name: db
            max: 1
        - semaphore:
            name: idle
            max: 3
        """,
}
UNIT_TAKES_DB = {
    ".zuul.yaml": """
        - job:
            name: unit
            run: ci/unit.sh
            semaphores: [db]
        - project:
            check:
              jobs: [unit]
        """,
}


def test_semaphores_and_authorizations(web: WebServer) -> None:
    system = web.system
    gate = HeldGate(system)  # unit runs until released; here it takes semaphore db
    system.repos.commit("config", "main", SEMAPHORES)
    gate.base = system.repos.commit("app", "main", UNIT_TAKES_DB)
    for ref in ("one", "two"):
        gate.change(ref)
    system.start_worker(concurrency=4)
    system.sluice("reconfigure")
    path = "/api/tenant/demo/semaphores"
    assert web.get(path) == [
        {
            "name": "db",
            "global": False,
            "max": 1,
            "holders": {"count": 0, "this_tenant": [], "other_tenants": 0},
        },
        {
            "name": "idle",
            "global": False,
            "max": 3,
            "holders": {"count": 0, "this_tenant": [], "other_tenants": 0},
        },
    ]
    system.enqueue("one")
    system.enqueue("two")

    def holders() -> list[dict[str, str]] | None:
        db = web.get(path)[0]
        found: list[dict[str, str]] = db["holders"]["this_tenant"]
        return found if db["holders"]["count"] == 1 else None

    (holder,) = wait_until(holders, 60, "unit holding db")
    assert holder["job_name"] == "unit"

    def items() -> list[dict[str, Any]] | None:
        status = web.get("/api/tenant/demo/status")
        queues = [q for p in status["pipelines"] for q in p["change_queues"]]
        found = [i for q in queues for head in q["heads"] for i in head]
        waiting = [j for i in found for j in i["jobs"] if j["waiting_status"] == "semaphore: db"]
        return found if len(found) == 2 and len(waiting) == 1 else None

    queued = wait_until(items, 60, "the other unit waiting for db")
    running = [i for i in queued if not any(j["waiting_status"] for j in i["jobs"])]
    assert [i["buildset"] for i in running] == [holder["buildset_uuid"]]
    assert web.get(path)[0]["holders"]["count"] == 1
    gate.release()
    system.sluice("wait", "--idle", "--timeout", "90")
    assert web.get(path)[0]["holders"]["count"] == 0
    assert refused(web, "/api/tenant/nope/semaphores", 404)["description"] == "Unknown tenant"
    assert web.request("GET", path + "?name=db").status == 400
    assert refused(web, "/api/tenant/de%20mo/semaphores", 400)["field"] == "tenant"

    # authorizations: what the bearer of the token may do (Zuul's shape)
    tenant_path = "/api/tenant/demo/authorizations"
    assert refused(web, tenant_path, 401)["error"] == "Unauthorized"
    assert refused(web, "/api/authorizations", 401)
    refused(web, tenant_path, 401, auth="not-a-jwt")
    refused(web, tenant_path, 401, auth=token("demo", expires_in=-60))
    refused(web, tenant_path, 401, auth=token("demo", secret="y" * 40))
    mine = web.get(tenant_path, auth=token("demo"))
    assert mine == {"zuul": {"admin": True, "scope": ["demo"]}, "admin_tenants": ["demo"]}
    theirs = web.get(tenant_path, auth=token("other"))
    assert theirs["zuul"] == {"admin": False, "scope": ["demo"]}
    assert web.get(tenant_path, auth=token("*"))["zuul"]["admin"] is True
    body = refused(web, "/api/tenant/nope/authorizations", 404, auth=token("*"))
    assert body["description"] == "Unknown tenant"
    refused(web, "/api/tenant/no%20pe/authorizations", 400, auth=token("*"))
    assert web.get("/api/authorizations", auth=token("*"))["zuul"] == {
        "admin": True,
        "scope": ["*"],
    }
    root = web.get("/api/authorizations", auth=token("demo", "other"))
    assert root == {"zuul": {"admin": False, "scope": ["*"]}, "admin_tenants": ["demo", "other"]}


def test_labels_nodes_and_project_ssh_keys(
    system: SluiceSystem,
    client: ZooKeeperClient,  # noqa: F811 (the fixture)
) -> None:
    prepare_check(system)
    configure_nodes(system)  # a static provider (ubuntu) and a local one (sandbox)
    system.start_worker(("launcher",))
    system.start_worker(("scheduler", "merger"))
    system.sluice("reconfigure")
    with start_web(system, WEB_CONFIG) as web:
        assert web.get("/api/tenant/demo/labels") == [{"name": "sandbox"}, {"name": "ubuntu"}]
        assert web.get("/api/tenant/demo/nodes") == []
        store = NodeStore(client)
        # a node belongs to the tenant whose pipeline asked for it
        asker = PipelineRequestor("demo", "check", "b1", "unit")
        request_id = store.submit(["ubuntu"], "tests/nodes", notify=asker)

        def served() -> Any:
            found = store.request(request_id)
            return found if found and found.state == NodeRequestState.FULFILLED else None

        request = wait_until(served, 60, "the node request fulfilled")
        (node,) = web.get("/api/tenant/demo/nodes")
        assert node["id"] == request.nodes[0] and node["type"] == ["ubuntu"]
        assert node["provider"] == "hosts" and node["state"] == "ready"
        assert node["external_id"].endswith(".example.com") and node["connection_type"] == "ssh"
        assert node["state_time"] <= time.time() and "comment" in node
        assert "connection" not in node and "username" not in str(node)
        for route in ("labels", "nodes"):
            body = refused(web, f"/api/tenant/nope/{route}", 404)
            assert body["description"] == "Unknown tenant"
            assert web.request("GET", f"/api/tenant/demo/{route}?x=1").status == 400

        # the project's SSH key: OpenSSH's format, made once, not the secrets key
        ssh = web.request("GET", "/api/tenant/demo/project-ssh-key/app.pub")
        assert ssh.status == 200 and ssh.headers["content-type"].startswith("text/plain")
        assert ssh.body.startswith("ssh-rsa ") and ssh.body.endswith("\n")
        assert load_ssh_public_key(ssh.body.encode()).key_size == 2048
        assert web.request("GET", "/api/tenant/demo/project-ssh-key/app.pub").body == ssh.body
        secrets = web.request("GET", "/api/tenant/demo/key/app.pub").body
        assert secrets.startswith("-----BEGIN PUBLIC KEY-----")
        body = refused(web, "/api/tenant/demo/project-ssh-key/nope.pub", 404)
        assert body["field"] == "project" and "nope" in body["description"]
        assert refused(web, "/api/tenant/demo/project-ssh-key/a%20b.pub", 400)["field"] == "project"
        huge = "/api/tenant/demo/project-ssh-key/" + "p" * 5000 + ".pub"
        assert refused(web, huge, 400)["field"] == "project"
        body = refused(web, "/api/tenant/nope/project-ssh-key/app.pub", 404)
        assert body["description"] == "Unknown tenant"


def test_protected_reads_cover_the_new_routes(
    protected: WebServer,  # noqa: F811 (the fixture)
) -> None:
    web = protected
    routes = (
        "build-times",
        "badge",
        "semaphores",
        "labels",
        "nodes",
        "project-ssh-key/app.pub",
    )
    for route in routes:
        for tenant in ("demo", "nope"):
            path = f"/api/tenant/{tenant}/{route}"
            assert web.request("GET", path).status == 401, path
            assert web.request("GET", path, auth=token("other")).status == 403, path
        answer = web.request("GET", f"/api/tenant/demo/{route}", auth=token("demo"))
        assert answer.status == 200, (route, answer)
    (build,) = [
        b for b in web.get("/api/tenant/demo/builds", auth=token("demo")) if b["job_name"] == "lint"
    ]
    log = build["log_url"] + "job-output.txt"
    assert httpx.get(log).status_code == 401
    auth = {"Authorization": f"Bearer {token('demo')}"}
    assert "linting" in httpx.get(log, headers=auth).text
    assert httpx.get(log, headers={"Authorization": f"Bearer {token('other')}"}).status_code == 403
    # what a token may do: a tenant it cannot read is a 403 here
    path = "/api/tenant/demo/authorizations"
    assert web.request("GET", path, auth=token("other")).status == 403
    assert web.get(path, auth=token("demo"))["zuul"]["admin"] is True
    assert web.get("/api/authorizations", auth=token("other"))["zuul"]["admin"] is False
