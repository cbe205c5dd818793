"""Health, metrics, RS256 tokens and protected reads; two instances answer alike."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from tests.e2e.system import SluiceSystem
from tests.e2e.test_check_pipeline import prepare_check
from tests.web.server import WebServer, start_web, token


def test_health_and_metrics(web: WebServer) -> None:
    health = web.request("GET", "/health")
    assert (health.status, health.body) == (
        200,
        {"status": "ok", "zookeeper": "ok", "broker": "ok"},
    )
    prepare_check(web.system)
    web.system.start_workers()
    web.system.sluice("reconfigure")
    web.system.enqueue("feature")
    web.system.sluice("wait", "--idle", "--timeout", "90")
    metrics = web.request("GET", "/metrics")
    assert metrics.status == 200
    assert "sluice_pipeline_items" in metrics.body or "sluice_" in metrics.body
    assert 'result="SUCCESS"' in metrics.body


@pytest.fixture
def rsa_web(system: SluiceSystem, tmp_path: Path) -> Iterator[tuple[WebServer, bytes]]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    (tmp_path / "sso.pem").write_bytes(public)
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    config = f"""
web:
  protect_reads: true
  authenticators:
    - name: sso
      algorithm: RS256
      public_key: {tmp_path / "sso.pem"}
      audience: sluice
"""
    with start_web(system, config) as server:
        yield server, private


def test_rs256_tokens_and_protected_reads(rsa_web: tuple[WebServer, bytes]) -> None:
    web, private = rsa_web
    prepare_check(web.system)
    web.system.start_workers()
    web.system.sluice("reconfigure")
    claims = {"sub": "bob", "aud": "sluice", "exp": int(time.time()) + 600}
    reader = jwt.encode(claims, private, algorithm="RS256")
    admin = jwt.encode({**claims, "zuul": {"admin": ["*"]}}, private, algorithm="RS256")
    assert web.request("GET", "/api/tenants").status == 401
    assert web.request("GET", "/api/tenants", auth=reader).status == 200
    wrong_audience = jwt.encode({**claims, "aud": "other"}, private, algorithm="RS256")
    assert web.request("GET", "/api/tenants", auth=wrong_audience).status == 401
    assert web.request("GET", "/api/tenants", auth=token("demo")).status == 401  # HS256
    path = "/api/tenant/demo/project/app/enqueue"
    body = {"pipeline": "check", "change": "feature"}
    assert web.request("POST", path, body, auth=reader).status == 403
    assert web.request("POST", path, body, auth=admin).status == 200
    web.system.sluice("wait", "--idle", "--timeout", "90")


def test_two_instances_share_nothing_but_zookeeper_and_sql(
    web: WebServer, system: SluiceSystem
) -> None:
    prepare_check(system)
    system.start_workers()
    system.sluice("reconfigure")
    with start_web(system, "") as second:
        assert (
            web.request(
                "POST",
                "/api/tenant/demo/project/app/enqueue",
                {"pipeline": "check", "change": "feature"},
                auth=token("demo"),
            ).body
            is True
        )
        system.sluice("wait", "--idle", "--timeout", "90")
        # the same history; each instance gives its own URL of a build's log
        seen = [second.get("/api/tenant/demo/builds"), web.get("/api/tenant/demo/builds")]
        for builds, instance in zip(seen, (second, web), strict=True):
            for build in builds:
                assert build.pop("log_url").startswith(f"{instance.url}/api/tenant/demo/build/")
        assert seen[0] == seen[1]
        assert (
            second.get("/api/tenant/demo/status")["pipelines"]
            == web.get("/api/tenant/demo/status")["pipelines"]
        )
