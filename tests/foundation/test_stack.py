"""``sluice stack up | status | down`` and ``sluice demo`` as a user runs them."""

from __future__ import annotations

import base64
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

from cli.stack import process
from cli.stack.redis import probe as redis_probe
from cli.stack.workers import EXECUTOR_CONCURRENCY
from tests.e2e.system import Repos
from tests.fixtures.waiting import wait_until


def sluice(config: Path, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLUICE_")}
    return subprocess.run(
        [str(Path(__import__("sys").executable).parent / "sluice"), "--config", str(config), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=config.parent,
        check=False,
    )


def _flower_workers(url: str, login: tuple[str, str] | None) -> int:
    request = urllib.request.Request(f"{url}/api/workers")
    if login is not None:
        token = base64.b64encode(":".join(login).encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def pids_in(statuses: str) -> list[int]:
    pids = []
    for line in statuses.splitlines()[1:]:
        cell = line.split()[1]
        if cell.isdigit():
            pids.append(int(cell))
    return pids


def children(pid: int) -> list[int]:
    """The processes ``pid`` started (a prefork worker's pool), from ``/proc``."""
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(child) for child in text.split()]


def test_stack_up_status_demo_down(tmp_path: Path) -> None:
    zk_port, redis_port, web_port = process.free_port(), process.free_port(), process.free_port()
    config = tmp_path / "sluice.yaml"
    config.write_text(
        f"zookeeper:\n  hosts: 127.0.0.1:{zk_port}\n  root: /sluice\n  session_timeout: 10\n"
        f"broker_url: redis://127.0.0.1:{redis_port}/0\n"
        "database_url: sqlite:///state/sluice.db\nstate_dir: state\n"
        "tenant_config: main.yaml\n"
        "connections:\n  local:\n    driver: git\n    baseurl: repos\n"
        f"web:\n  listen: 127.0.0.1:{web_port}\n"
    )
    # a tenant with a config project: `stack up` loads it (Zuul loads every tenant at start)
    (tmp_path / "main.yaml").write_text(
        "- tenant:\n    name: demo\n    source:\n      local:\n        config-projects: [config]\n"
    )
    Repos(tmp_path / "repos").commit(
        "config", "main", {"zuul.yaml": "- job:\n    name: base\n    parent: null\n"}
    )
    up = sluice(config, "stack", "up")
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        assert "tenant demo: loaded" in up.stdout, up.stdout + up.stderr
        for name in (
            "zookeeper",
            "redis",
            "worker-scheduler",
            "worker-merger",
            "worker-executor",
            "worker-maintenance",
            "supervisor",
            "web",
        ):
            assert name in up.stdout
        assert f"Web: http://127.0.0.1:{web_port}/" in up.stdout
        with urllib.request.urlopen(f"http://127.0.0.1:{web_port}/api/tenants", timeout=10) as r:
            assert b'"demo"' in r.read()
        assert (tmp_path / "state" / "zookeeper" / "zoo.cfg").is_file()
        # the Redis it started asks for a password made now, kept 0600 in the state dir
        password_file = tmp_path / "state" / "broker.password"
        assert password_file.stat().st_mode & 0o777 == 0o600
        broker_password = password_file.read_text().strip()
        redis_url = f"redis://127.0.0.1:{redis_port}/0"
        assert "authentication failed" in redis_probe(redis_url)
        assert redis_probe(f"redis://:{broker_password}@127.0.0.1:{redis_port}/0") == ""

        status = sluice(config, "stack", "status")
        assert status.returncode == 0, status.stdout + status.stderr
        assert status.stdout.count("healthy") == 8, status.stdout
        pids = pids_in(status.stdout)
        assert len(pids) == 8  # everything was started by us, nothing reused

        again = sluice(config, "stack", "up", "--flower")
        assert again.returncode == 0, again.stderr
        flower = next(x for x in again.stdout.splitlines() if x.startswith("Flower: "))
        _, url, _, user, _, password, *_ = flower.split()
        assert _flower_workers(url, None) == 401
        assert _flower_workers(url, (user, password)) == 200
        pids.append(next(p for p in pids_in(again.stdout) if p not in pids))
        assert sorted(pids_in(again.stdout)) == sorted(pids)  # up twice is harmless
        assert "password" not in sluice(config, "stack", "up", "--flower").stdout  # once

        demo = sluice(config, "roundtrip")
        assert demo.returncode == 0, demo.stdout + demo.stderr
        assert "round trip OK" in demo.stdout

        # a worker killed -9 is started again by the supervisor, and status says so
        (killed,) = [
            int(line.split()[1]) for line in status.stdout.splitlines() if "worker-executor" in line
        ]
        # builds mostly wait: the executor runs EXECUTOR_CONCURRENCY at once, the others 2
        (merger,) = [
            int(line.split()[1]) for line in status.stdout.splitlines() if "worker-merger" in line
        ]
        wait_until(lambda: len(children(killed)) == EXECUTOR_CONCURRENCY, 30, "executor pool")
        wait_until(lambda: len(children(merger)) == 2, 30, "merger pool")
        os.kill(killed, signal.SIGKILL)

        def restarted() -> bool:
            now = sluice(config, "stack", "status").stdout
            line = next(x for x in now.splitlines() if x.startswith("worker-executor"))
            return "healthy" in line and "1 (last" in line

        wait_until(restarted, 90, "the executor worker restarted", interval=0.5)
        now = sluice(config, "stack", "status").stdout
        pids = pids_in(now)
        assert killed not in pids and len(pids) == 9
        (restarted_pid,) = [
            int(line.split()[1]) for line in now.splitlines() if line.startswith("worker-executor")
        ]
        wait_until(
            lambda: len(children(restarted_pid)) == EXECUTOR_CONCURRENCY,
            30,
            "the restarted executor's pool",
        )
        shown = up.stdout + up.stderr + status.stdout + again.stdout + demo.stdout + now
        logs = [p.read_text(errors="replace") for p in (tmp_path / "state").rglob("*.log")]
        assert broker_password not in shown + "".join(logs)  # never printed nor logged
    finally:
        down = sluice(config, "stack", "down")
    assert down.returncode == 0, down.stderr
    assert all(not process.is_alive(pid) for pid in pids)
    after = sluice(config, "stack", "status")
    assert after.returncode == 1
    assert "not running" in after.stdout


def test_a_component_that_cannot_start_is_named(tmp_path: Path) -> None:
    # The ZooKeeper port is taken by something that is not ZooKeeper.
    import socket

    blocker = socket.socket()
    blocker.bind(("127.0.0.1", 0))
    blocker.listen()
    port = blocker.getsockname()[1]
    config = tmp_path / "sluice.yaml"
    # a broker port of its own: an open Redis on the default port is refused first
    broker = f"broker_url: redis://127.0.0.1:{process.free_port()}/0\n"
    config.write_text(f"zookeeper:\n  hosts: 127.0.0.1:{port}\n{broker}")
    try:
        result = sluice(config, "stack", "up", timeout=60)
    finally:
        blocker.close()
        sluice(config, "stack", "down")
    assert result.returncode == 1
    assert "ZooKeeper: port" in result.stderr
    assert "is taken" in result.stderr


def test_children_die_with_a_killed_parent(tmp_path: Path) -> None:
    """A test run killed by SIGKILL leaves no service behind (PR_SET_PDEATHSIG)."""
    script = tmp_path / "parent.py"
    script.write_text(
        "import sys, time\n"
        "from pathlib import Path\n"
        "from cli.stack import process\n"
        "process.children_die_with_parent()\n"
        "child = process.spawn(['sleep', '300'], Path(sys.argv[1]))\n"
        "print(child.pid, flush=True)\n"
        "time.sleep(300)\n"
    )
    parent = subprocess.Popen(
        [sys.executable, str(script), str(tmp_path / "child.log")],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    assert process.is_alive(child)
    parent.kill()
    parent.wait(timeout=10)
    wait_until(lambda: not process.is_alive(child), timeout=10, what="the orphan to die")
