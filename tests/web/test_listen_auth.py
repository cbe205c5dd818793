"""``sluice web`` never serves outside loopback without authentication (docs/reliability.md, 20a).

Real ``sluice web`` processes: on ``0.0.0.0`` without an authenticator it
refuses to start, with exit status 1 and one line naming the settings; on
127.0.0.1 it starts; on ``0.0.0.0`` it starts with an authenticator, or with
the operator's explicit ``web.allow_unauthenticated`` (and then refuses
every admin verb).
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from cli.stack import process
from tests.fixtures.cli import SLUICE, clean_env, run_sluice
from tests.fixtures.waiting import wait_until


def _config(tmp_path: Path, web: str) -> Path:
    config = tmp_path / "sluice.yaml"
    config.write_text(f"state_dir: state\nweb:\n{web}")
    return config


@contextmanager
def _serving(config: Path, listen: str) -> Iterator[int]:
    """``sluice web --listen`` running; its port."""
    port = int(listen.rsplit(":", 1)[1])
    log = config.parent / "web.log"
    argv = [SLUICE, "--config", str(config), "web", "--listen", listen]
    proc = process.spawn(argv, log, env=clean_env(), cwd=config.parent)
    try:
        wait_until(
            lambda: process.port_open("127.0.0.1", port) or not process.is_alive(proc.pid),
            30,
            "sluice web to listen",
        )
        assert process.is_alive(proc.pid), log.read_text()
        yield port
    finally:
        process.stop_group(proc.pid)


def _post_enqueue(port: int) -> tuple[int, dict[str, str]]:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/api/tenant/demo/project/app/enqueue",
        data=json.dumps({"pipeline": "check", "change": "feature"}).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(response.status), json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return int(exc.code), json.loads(exc.read())


def test_outside_loopback_without_an_authenticator_it_refuses_to_start(tmp_path: Path) -> None:
    port = process.free_port()
    config = _config(tmp_path, "  listen: 127.0.0.1:9000\n")
    started = time.monotonic()
    done = run_sluice("--config", str(config), "web", "--listen", f"0.0.0.0:{port}", cwd=tmp_path)
    print(f"sluice web refused in {time.monotonic() - started:.2f}s")
    assert done.returncode == 1
    assert done.stderr.strip() == (
        f"Error: refusing to serve on 0.0.0.0:{port} without authentication: web.listen is "
        "outside loopback and web.authenticators is empty; add an authenticator, listen on "
        "127.0.0.1, or set web.allow_unauthenticated: true (admin verbs stay refused)"
    )
    assert not process.port_open("127.0.0.1", port)


def test_on_loopback_it_starts(tmp_path: Path) -> None:
    config = _config(tmp_path, "  protect_reads: false\n")
    with _serving(config, f"127.0.0.1:{process.free_port()}") as port:
        assert _post_enqueue(port)[0] == 401  # no authenticator: every admin verb refused


def test_outside_loopback_it_starts_with_an_authenticator(tmp_path: Path) -> None:
    config = _config(
        tmp_path,
        "  authenticators:\n    - {name: local, algorithm: HS256, secret: a-long-random-secret}\n",
    )
    with _serving(config, f"0.0.0.0:{process.free_port()}") as port:
        status, body = _post_enqueue(port)
        assert status == 401
        assert "an admin token is required" in body["description"]


def test_outside_loopback_the_override_serves_reads_and_refuses_admin_verbs(
    tmp_path: Path,
) -> None:
    config = _config(tmp_path, "  allow_unauthenticated: true\n")
    with _serving(config, f"0.0.0.0:{process.free_port()}") as port:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/info", timeout=10) as r:
            assert r.status == 200
        status, body = _post_enqueue(port)
        assert status == 401
        assert "an admin token is required" in body["description"]
