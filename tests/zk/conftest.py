"""Fixtures of the ZooKeeper layer tests: clients, subprocess helpers, a hangable proxy."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from scheduler.settings.sections import ZooKeeperSettings
from scheduler.zk.client import ZooKeeperClient, connect
from tests.fixtures.services import ZooKeeperTarget
from tests.fixtures.waiting import wait_until
from tests.zk.proxy import TcpProxy

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def zk_settings(zookeeper: ZooKeeperTarget) -> ZooKeeperSettings:
    return zookeeper.settings(session_timeout=10.0)


@pytest.fixture
def make_client(zookeeper: ZooKeeperTarget) -> Iterator[Callable[..., ZooKeeperClient]]:
    """Connect clients to the test's chroot; all are closed at the end."""
    clients: list[ZooKeeperClient] = []

    def make(session_timeout: float = 10.0, **changes: Any) -> ZooKeeperClient:
        settings = replace(zookeeper.settings(session_timeout=session_timeout), **changes)
        client = connect(settings)
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.stop()
        client.close()


@pytest.fixture
def zk(make_client: Callable[..., ZooKeeperClient]) -> ZooKeeperClient:
    return make_client()


@pytest.fixture
def proxy(zookeeper: ZooKeeperTarget) -> Iterator[TcpProxy]:
    host, port = zookeeper.hosts.rsplit(":", 1)
    tcp = TcpProxy(host, int(port))
    tcp.start()
    yield tcp
    tcp.stop()


class Script:
    """A test helper script running in its own Python process."""

    def __init__(self, name: str, settings: ZooKeeperSettings, *args: str) -> None:
        config = json.dumps(
            {"hosts": settings.hosts, "root": settings.root, "timeout": settings.session_timeout}
        )
        self.proc = subprocess.Popen(
            [sys.executable, "-m", f"tests.zk.scripts.{name}", config, *args],
            cwd=REPO,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        self.pid = self.proc.pid

    def expect(self, prefix: str, timeout: float = 20.0) -> str:
        """The next stdout line, which must start with ``prefix``."""
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"script {self.pid}: no {prefix!r} within {timeout}s")
            ready, _, _ = select.select([self.proc.stdout], [], [], left)
            if ready:
                line = self.proc.stdout.readline()
                if not line:
                    raise AssertionError(f"script {self.pid} exited before {prefix!r}")
                line = line.strip()
                if line.startswith(prefix):
                    return line
                raise AssertionError(f"script {self.pid}: expected {prefix!r}, got {line!r}")

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def signal(self, sig: int) -> None:
        os.kill(self.pid, sig)

    def kill9(self) -> None:
        """SIGKILL, then confirm death through /proc/PID/stat (gone or zombie)."""
        os.kill(self.pid, signal.SIGKILL)
        wait_until(lambda: process_dead(self.pid), timeout=10, what=f"death of {self.pid}")
        self.proc.wait(timeout=10)

    def finish(self, timeout: float = 30.0) -> int:
        return self.proc.wait(timeout=timeout)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                stream.close()


def process_state(pid: int) -> str | None:
    """The state letter of /proc/PID/stat (``R``, ``S``, ``T``, ``Z``...), None if gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return None
    return text.rsplit(")", 1)[1].split()[0]


def process_dead(pid: int) -> bool:
    return process_state(pid) in (None, "Z", "X")


@pytest.fixture
def script(zookeeper: ZooKeeperTarget) -> Iterator[Callable[..., Script]]:
    started: list[Script] = []

    def start(name: str, *args: str, session_timeout: float = 10.0) -> Script:
        proc = Script(name, zookeeper.settings(session_timeout=session_timeout), *args)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        if proc.proc.poll() is None and process_state(proc.pid) == "T":
            os.kill(proc.pid, signal.SIGCONT)
        proc.close()
