"""A Redis server run as a child, or the reuse of a reachable one."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import redis

from cli.stack import process


def ping(url: str, timeout: float = 1.0) -> bool:
    """True if the Redis at ``url`` answers PING."""
    try:
        client = redis.Redis.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except (redis.RedisError, OSError, ValueError):
        return False


def host_port(url: str) -> tuple[str, int]:
    parsed = urlparse(url)
    return parsed.hostname or "127.0.0.1", parsed.port or 6379


@dataclass
class RedisServer:
    data_dir: Path
    port: int
    host: str = "127.0.0.1"
    proc_pid: int | None = None

    @property
    def log_file(self) -> Path:
        return self.data_dir / "redis.log"

    @property
    def url(self) -> str:
        return f"redis://{self.host}:{self.port}/0"

    def command(self) -> list[str]:
        return [
            "redis-server",
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

    def start(self) -> int:
        self.data_dir.mkdir(parents=True, exist_ok=True)
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
