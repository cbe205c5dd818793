"""The REST API over a real system: Zuul's paths and fields, clear errors, admin tokens."""

from __future__ import annotations

from tests.e2e.test_check_pipeline import prepare_check
from tests.web.server import WebServer, token


def ran_check(web: WebServer) -> None:
    system = web.system
    prepare_check(system)
    system.start_workers()
    system.sluice("reconfigure")
    system.enqueue("feature")
    system.sluice("wait", "--idle", "--timeout", "90")


def test_reads_after_a_check(web: WebServer) -> None:
    ran_check(web)
    assert web.get("/api/info")["info"]["capabilities"]["job_history"] is True
    assert web.get("/api/tenants") == [{"name": "demo", "projects": 2, "queue": 0}]
    status = web.get("/api/tenant/demo/status")
    assert [p["name"] for p in status["pipelines"]] == ["check"]

    builds = web.get("/api/tenant/demo/builds")
    assert {b["job_name"]: b["result"] for b in builds} == {
        "lint": "SUCCESS",
        "unit": "SUCCESS",
        "experimental": "FAILURE",
    }
    lint = next(b for b in builds if b["job_name"] == "lint")
    assert lint["ref"] == "feature" and lint["project"] == "app" and lint["pipeline"] == "check"
    assert lint["refs"][0]["project"] == "app" and lint["buildset"]["uuid"]
    assert web.get(f"/api/tenant/demo/build/{lint['uuid']}")["uuid"] == lint["uuid"]
    assert [b["job_name"] for b in web.get("/api/tenant/demo/builds?result=FAILURE")] == [
        "experimental"
    ]
    assert len(web.get("/api/tenant/demo/builds?limit=1&skip=1")) == 1
    assert web.get("/api/tenant/demo/builds?job_name=unit&project=app")[0]["job_name"] == "unit"

    (buildset,) = web.get("/api/tenant/demo/buildsets")
    assert buildset["result"] == "SUCCESS"
    full = web.get(f"/api/tenant/demo/buildset/{buildset['uuid']}")
    assert sorted(b["job_name"] for b in full["builds"]) == ["experimental", "lint", "unit"]

    jobs = {j["name"] for j in web.get("/api/tenant/demo/jobs")}
    assert {"base", "lint", "unit", "experimental"} <= jobs
    (variant,) = web.get("/api/tenant/demo/job/unit")
    assert variant["parent"] is None or variant["parent"] == "base"
    assert variant["source_context"]["project"] == "app"
    assert {p["name"]: p["type"] for p in web.get("/api/tenant/demo/projects")} == {
        "config": "config",
        "app": "untrusted",
    }
    project = web.get("/api/tenant/demo/project/app")
    assert project["configs"][0]["pipelines"][0]["name"] == "check"
    assert [p["name"] for p in web.get("/api/tenant/demo/pipelines")] == ["check"]
    assert web.get("/api/tenant/demo/config-errors") == []
    components = web.get("/api/components")
    assert components and all(isinstance(v, list) for v in components.values())
    assert web.get("/api/tenant/demo/autohold") == []
    log = web.request("GET", f"/api/tenant/demo/build/{lint['uuid']}/log")
    assert log.status == 200 and "linting" in log.body
    assert log.headers["x-build-finished"] == "true"


def test_bad_input_is_a_4xx_naming_the_field(web: WebServer) -> None:
    ran_check(web)
    cases = {
        "/api/tenant/nope/status": (404, "tenant"),
        "/api/tenant/demo/builds?limit=zero": (400, "limit"),
        "/api/tenant/demo/builds?limit=-1": (400, "limit"),
        "/api/tenant/demo/builds?result=GREAT": (400, "result"),
        "/api/tenant/demo/builds?colour=red": (400, "colour"),
        "/api/tenant/demo/build/not-a-uuid!": (400, "uuid"),
        "/api/tenant/demo/build/0123456789abcdef": (404, "uuid"),
        "/api/tenant/demo/job/nope": (404, "name"),
        "/api/tenant/demo/project/nope": (404, "project"),
        "/api/tenant/de%00mo/status": (400, "tenant"),
        "/api/tenant/..%20x/status": (400, "tenant"),
    }
    for path, (status, field) in cases.items():
        answer = web.request("GET", path)
        assert answer.status == status, (path, answer)
        assert answer.body["field"] == field, (path, answer)
        assert answer.body["description"], (path, answer)
    # decoded slashes make another path: no endpoint has it
    assert web.request("GET", "/api/tenant/..%2F..%2Fsecrets/status").status == 404
    assert web.request("GET", "/api/nothing-here").status == 404
    assert web.request("PUT", "/api/tenants").status == 405


def test_admin_verbs_need_a_token_for_the_tenant(web: WebServer) -> None:
    ran_check(web)
    body = {"pipeline": "check", "change": "feature"}
    path = "/api/tenant/demo/project/app/enqueue"
    assert web.request("POST", path, body).status == 401
    assert web.request("POST", path, body, auth="not-a-jwt").status == 401
    assert web.request("POST", path, body, auth=token("demo", secret="x" * 40)).status == 401
    assert web.request("POST", path, body, auth=token("demo", expires_in=-60)).status == 401
    assert web.request("POST", path, body, auth=token("other")).status == 403
    bad = web.request("POST", path, {"change": "feature"}, auth=token("demo"))
    assert (bad.status, bad.body["field"]) == (400, "pipeline")
    bad = web.request("POST", path, {"pipeline": "nope", "change": "feature"}, auth=token("demo"))
    assert bad.status == 400 and "nope" in bad.body["description"]
    bad = web.request("POST", path, {"pipeline": "check", "change": "nope"}, auth=token("demo"))
    assert bad.status == 400 and "no ref 'nope'" in bad.body["description"]
    answer = web.request("POST", path, body, auth=token("demo"))
    assert (answer.status, answer.body) == (200, True)
    web.system.sluice("wait", "--idle", "--timeout", "90")
    assert len(web.get("/api/tenant/demo/buildsets")) == 2
