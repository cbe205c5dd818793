"""A real ``sluice web`` process over a test system, and a client that speaks to it."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jwt
import pytest

from cli.stack.process import free_port
from tests.e2e.system import SluiceSystem
from tests.fixtures.waiting import wait_until

SECRET = "sluice-test-secret-of-at-least-32-bytes"
ISSUER = "sluice-tests"
KEYSTORE_PASSWORD = "sluice-test-keystore-password"
WEB_CONFIG = f"""
web:
  authenticators:
    - name: tests
      algorithm: HS256
      secret: {SECRET}
      issuer: {ISSUER}
keystore:
  password: {KEYSTORE_PASSWORD}
"""


def token(*tenants: str, secret: str = SECRET, expires_in: float = 3600, **claims: Any) -> str:
    """A JWT making its bearer an admin of ``tenants`` (Zuul's claim layout)."""
    payload = {
        "sub": "alice",
        "iss": ISSUER,
        "exp": int(time.time() + expires_in),
        "zuul": {"admin": list(tenants)},
        **claims,
    }
    return jwt.encode(payload, secret, algorithm="HS256")


@dataclass
class Answer:
    status: int
    body: Any
    headers: dict[str, str]


@dataclass
class WebServer:
    url: str
    system: SluiceSystem
    log: Path
    pid: int = 0

    def request(
        self, method: str, path: str, body: Any = None, *, auth: str | None = None
    ) -> Answer:
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"}
        if auth:
            headers["Authorization"] = f"Bearer {auth}"
        request = urllib.request.Request(self.url + path, data, headers, method=method)
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                raw = response.read()
                status, found = response.status, dict(response.headers)
        except urllib.error.HTTPError as exc:
            raw, status, found = exc.read(), exc.code, dict(exc.headers)
        kind = found.get("content-type", "")
        text = raw.decode("utf-8", "replace")
        parsed = json.loads(text) if kind.startswith("application/json") and text else text
        return Answer(status, parsed, found)

    def get(self, path: str, **options: Any) -> Any:
        answer = self.request("GET", path, **options)
        assert answer.status == 200, (path, answer)
        return answer.body


@contextlib.contextmanager
def start_web(system: SluiceSystem, config: str) -> Iterator[WebServer]:
    """``sluice web`` (the console script) on a free port, ``config`` added to sluice.yaml."""
    base = system.config.read_text()
    if config and "web:" in base:
        raise AssertionError("sluice.yaml has a web section already")
    path = system.root / f"sluice-web-{free_port()}.yaml"
    path.write_text(base + config)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLUICE_")}
    env.update(system.env())
    env["SLUICE_CONFIG"] = str(path)
    log = system.root / f"web-{port}.log"
    command = str(Path(sys.executable).parent / "sluice")
    with log.open("w") as out:
        proc = subprocess.Popen(
            [command, "web", "--listen", f"127.0.0.1:{port}"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    server = WebServer(f"http://127.0.0.1:{port}", system, log, proc.pid)
    try:

        def up() -> bool:
            if proc.poll() is not None:
                raise AssertionError(f"sluice web exited: {log.read_text()}")
            try:
                return server.request("GET", "/api/info").status == 200
            except OSError:
                return False

        wait_until(up, 30, "sluice web answering", interval=0.1)
        yield server
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if os.environ.get("SLUICE_TEST_SHOW_WEB_LOG"):
            print(log.read_text())


@pytest.fixture
def web(system: SluiceSystem) -> Iterator[WebServer]:
    """A ``sluice web`` over the test system that accepts :func:`token`'s HS256 tokens."""
    with start_web(system, WEB_CONFIG) as server:
        yield server
