"""The OpenAPI document, and schemathesis against it: no request makes a 5xx.

Bounded in examples and time (the run's budget is well under a minute);
the streaming endpoints (server-sent events) are left out, they never end.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.e2e.test_check_pipeline import prepare_check
from tests.web.server import WebServer, token

SCHEMATHESIS = str(Path(sys.executable).parent / "schemathesis")


def test_the_document_lists_every_endpoint(web: WebServer) -> None:
    document = web.get("/api/openapi.json")
    assert document["openapi"].startswith("3.")
    paths = document["paths"]
    for path in (
        "/api/info",
        "/api/tenants",
        "/api/tenant/{tenant}/status",
        "/api/tenant/{tenant}/builds",
        "/api/tenant/{tenant}/build/{uuid}",
        "/api/tenant/{tenant}/project/{project}/enqueue",
        "/api/tenant/{tenant}/promote",
        "/api/tenant/{tenant}/autohold/{id}",
        "/api/tenant/{tenant}/pipeline/{pipeline}/project/{project}/branch/{branch}/freeze-jobs",
        "/api/tenant/{tenant}/pipeline/{pipeline}/project/{project}/branch/{branch}/freeze-job/{job}",
        "/api/tenant/{tenant}/state",
        "/api/tenant/{tenant}/nodes",
        "/api/tenant/{tenant}/nodeset-requests",
        "/api/tenant/{tenant}/nodeset-requests/{request}",
        "/api/tenant/{tenant}/build-times",
        "/api/tenant/{tenant}/badge",
        "/api/tenant/{tenant}/semaphores",
        "/api/tenant/{tenant}/labels",
        "/api/tenant/{tenant}/project-ssh-key/{project}.pub",
        "/api/tenant/{tenant}/authorizations",
        "/api/authorizations",
        "/api/tenant/{tenant}/build/{uuid}/log/{path}",
    ):
        assert path in paths, path
    node = paths["/api/tenant/{tenant}/nodes/{node}"]["put"]
    assert node["security"] == [{"bearer": []}]
    assert node["requestBody"]["content"]["application/json"]["schema"]["properties"] == {
        "state": {"type": "string", "enum": ["hold", "used"]}
    }
    times = {p["name"] for p in paths["/api/tenant/{tenant}/build-times"]["get"]["parameters"]}
    assert {"project", "pipeline", "branch", "job_name", "result", "exclude_result"} <= times
    assert {"start_time", "end_time", "limit", "skip"} <= times
    assert paths["/api/authorizations"]["get"]["security"] == [{"bearer": []}]
    badge = paths["/api/tenant/{tenant}/badge"]["get"]["responses"]["200"]
    assert list(badge["content"]) == ["image/svg+xml"]
    key = paths["/api/tenant/{tenant}/project-ssh-key/{project}.pub"]["get"]["responses"]["200"]
    assert list(key["content"]) == ["text/plain"]
    enqueue = paths["/api/tenant/{tenant}/project/{project}/enqueue"]["post"]
    assert enqueue["security"] == [{"bearer": []}]
    limit = next(p for p in paths["/api/tenant/{tenant}/builds"]["get"]["parameters"]
                 if p["name"] == "limit")  # fmt: skip
    assert limit["schema"] == {"type": "integer", "minimum": 1, "maximum": 1000}


def test_schemathesis_finds_no_server_error(web: WebServer, tmp_path: Path) -> None:
    system = web.system
    prepare_check(system)
    system.start_workers()
    system.sluice("reconfigure")
    system.enqueue("feature")
    system.sluice("wait", "--idle", "--timeout", "90")
    # most cases use the real tenant, so they reach past the 404 of an unknown one
    (tmp_path / "schemathesis.toml").write_text('[parameters]\n"path.tenant" = "demo"\n')
    # fmt: off
    done = subprocess.run(
        [
            SCHEMATHESIS,
            "run",
            f"{web.url}/api/openapi.json",
            "--checks",
            "not_a_server_error",
            "--max-examples",
            "15",
            "--max-time",
            "30",
            "--seed",
            "1",
            "--exclude-path-regex",
            "(events|stream)$",
            "--request-timeout",
            "45",
            "--header",
            f"Authorization: Bearer {token('demo')}",
            "--report-dir",
            str(tmp_path),
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    # fmt: on
    output = done.stdout + done.stderr
    print(output[-3000:])
    assert done.returncode == 0, (
        output[-6000:] + "\n--- web log ---\n" + web.log.read_text()[-4000:]
    )
