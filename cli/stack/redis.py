"""A Redis server run as a child, or the reuse of a reachable one.

A Redis the stack starts asks for a password (``requirepass``): it is read
from a config file of mode 0600 beside its data, never from the command
line, where ``ps`` would show it to every user of the host.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlparse, urlsplit, urlunsplit

import redis

from cli.stack import process
from scheduler.settings import exposure


def probe(url: str, ssl_options: Mapping[str, Any] | None = None, timeout: float = 1.0) -> str:
    """What failed asking the Redis at ``url`` for PING (``authentication failed (...)``).

    "" when it answered.
    """
    try:
        client = redis.Redis.from_url(
            url, socket_timeout=timeout, socket_connect_timeout=timeout, **(ssl_options or {})
        )
        try:
            return "" if client.ping() else "no answer to PING"
        finally:
            client.close()
    except (redis.RedisError, OSError, ValueError) as exc:
        return exposure.broker_failure(exc)


def ping(url: str, ssl_options: Mapping[str, Any] | None = None, timeout: float = 1.0) -> bool:
    """True if the Redis at ``url`` answers PING."""
    return not probe(url, ssl_options, timeout)


def without_credentials(url: str) -> str:
    """``url`` with no user nor password: what a client that knows none of them reaches."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


def is_open(url: str, ssl_options: Mapping[str, Any] | None = None) -> bool:
    """True if the Redis at ``url`` answers a client that gives no password (an open Redis)."""
    return ping(without_credentials(url), ssl_options)


def host_port(url: str) -> tuple[str, int]:
    parsed = urlparse(url)
    return parsed.hostname or "127.0.0.1", parsed.port or 6379


@dataclass
class RedisServer:
    data_dir: Path
    port: int
    host: str = "127.0.0.1"
    proc_pid: int | None = None
    # clients must AUTH with it ("": none, for the tests' own servers)
    password: str = ""

    @property
    def log_file(self) -> Path:
        return self.data_dir / "redis.log"

    @property
    def config_file(self) -> Path:
        return self.data_dir / "redis.conf"

    @property
    def url(self) -> str:
        auth = f":{quote(self.password, safe='')}@" if self.password else ""
        return f"redis://{auth}{self.host}:{self.port}/0"

    def command(self) -> list[str]:
        # options after the config file override it; the file holds the password
        config = [str(self.config_file)] if self.password else []
        return [
            "redis-server",
            *config,
            "--port",
            str(self.port),
            "--bind",
            self.host,
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(self.data_dir),
            "--daemonize",
            "no",
            "--protected-mode",
            "no",
        ]

    def write_config(self) -> None:
        """The config file with ``requirepass``, readable by its owner only."""
        quoted = self.password.replace("\\", "\\\\").replace('"', '\\"')
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
        with os.fdopen(process.open_private(self.config_file, flags), "w") as out:
            out.write(f'requirepass "{quoted}"\n')

    def start(self) -> int:
        process.private_dir(self.data_dir)
        if self.password:
            self.write_config()
        proc = process.spawn(self.command(), self.log_file)
        self.proc_pid = proc.pid
        return proc.pid

    def wait_ready(self, timeout: float = 30.0) -> None:
        pid = self.proc_pid
        process.wait_for(
            lambda: ping(self.url),
            timeout,
            f"Redis on {self.host}:{self.port}",
            log_file=self.log_file,
            alive=(lambda: process.is_alive(pid)) if pid else None,
        )

    def stop(self, timeout: float = 10.0) -> None:
        if self.proc_pid is not None:
            process.stop_group(self.proc_pid, timeout)
            self.proc_pid = None
