"""``sluice stack up | down | status``: the local stack under the state dir.

``up`` starts what is missing: a ZooKeeper server (Debian's package, own data
dir and port), Redis (a reachable one at the configured URL is reused), and
one ``celery worker`` per queue. It waits by probing (``ruok``, ``PING``,
Celery ping) and fails naming the component and its log file. What ``up``
started is recorded in ``<state_dir>/run/stack.json`` so ``down`` stops
exactly that and nothing else, and a second ``up`` is harmless.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from celery import Celery

from cli.stack import process, workers
from cli.stack import redis as redis_service
from cli.stack import zookeeper as zk_service
from scheduler.errors import StackError
from scheduler.settings import Settings


@dataclass
class Component:
    """One entry of the stack file: a process ``up`` started or a reused service."""

    name: str
    kind: str  # zookeeper | redis | worker
    pid: int | None  # None: an existing service that ``up`` reused
    address: str  # host:port, or the Celery node name of a worker
    log: str = ""
    queues: str = ""


@dataclass
class ComponentStatus:
    component: Component
    running: bool
    healthy: bool

    @property
    def state(self) -> str:
        if self.healthy:
            return "healthy"
        return "unhealthy" if self.running else "stopped"


class LocalStack:
    """The local stack described by ``settings`` and recorded in its stack file."""

    def __init__(self, settings: Settings, worker_concurrency: int = 2) -> None:
        self.settings = settings
        self.worker_concurrency = worker_concurrency
        self.stack_file = settings.run_dir / "stack.json"

    # -- the record of what we started ----------------------------------

    def load(self) -> dict[str, Component]:
        try:
            raw = json.loads(self.stack_file.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            raise StackError(f"{self.stack_file}: unreadable stack file: {exc}") from None
        return {entry["name"]: Component(**entry) for entry in raw.get("components", [])}

    def save(self, components: dict[str, Component]) -> None:
        self.stack_file.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.stack_file.with_suffix(".tmp")
        data = {"components": [asdict(c) for c in components.values()]}
        tmp.write_text(json.dumps(data, indent=2) + "\n")
        tmp.replace(self.stack_file)

    # -- up ---------------------------------------------------------------

    def up(self) -> list[Component]:
        """Start every missing component and wait until all are healthy."""
        components = self.load()
        try:
            for component in self._start_services(components):
                components[component.name] = component
                self.save(components)
            for component in self._start_workers(components):
                components[component.name] = component
                self.save(components)
            self._wait_for_workers(components)
        finally:
            self.save(components)
        return list(components.values())

    def _start_services(self, known: dict[str, Component]) -> Iterator[Component]:
        host, port = self.zookeeper_address()
        current = known.get("zookeeper")
        if not (current and self._running(current) and zk_service.is_healthy(host, port)):
            yield self._start_zookeeper(host, port)
        url = self.settings.broker_url
        current = known.get("redis")
        if not (current and self._running(current) and redis_service.ping(url)):
            yield self._start_redis(url)

    def _start_zookeeper(self, host: str, port: int) -> Component:
        address = f"{host}:{port}"
        if zk_service.is_healthy(host, port):
            return Component("zookeeper", "zookeeper", None, address)
        if process.port_open(host, port):
            raise StackError(
                f"ZooKeeper: port {address} is taken by something that does not answer "
                "'ruok'; free it or set zookeeper.hosts in sluice.yaml"
            )
        server = zk_service.ZooKeeperServer(
            data_dir=self.settings.state_dir / "zookeeper", port=port, host=host
        )
        pid = server.start()
        server.wait_ready(timeout=90)
        return Component("zookeeper", "zookeeper", pid, address, str(server.log_file))

    def _start_redis(self, url: str) -> Component:
        host, port = redis_service.host_port(url)
        address = f"{host}:{port}"
        if redis_service.ping(url):
            return Component("redis", "redis", None, address)
        if host not in ("127.0.0.1", "localhost", "::1"):
            raise StackError(f"Redis at {url} does not answer PING and is not local to start")
        if process.port_open(host, port):
            raise StackError(f"Redis: port {address} is taken by something that is not Redis")
        server = redis_service.RedisServer(
            data_dir=self.settings.state_dir / "redis", port=port, host=host
        )
        pid = server.start()
        server.wait_ready()
        return Component("redis", "redis", pid, address, str(server.log_file))

    def _start_workers(self, known: dict[str, Component]) -> Iterator[Component]:
        for queue in workers.STACK_QUEUES:
            name = f"worker-{queue}"
            current = known.get(name)
            if current and self._running(current):
                continue
            node = workers.node_name(f"sluice-{queue}")
            log = self.settings.log_dir / f"{name}.log"
            extra: list[str] = []
            if queue == "maintenance":
                # The timer for periodic sweeps runs beside the maintenance worker.
                schedule = self.settings.run_dir / "celerybeat-schedule"
                extra = ["--beat", "--schedule", str(schedule)]
            argv = workers.worker_command(
                [queue], node, concurrency=self.worker_concurrency, extra=extra
            )
            proc = process.spawn(argv, log, env=self._worker_env())
            yield Component(name, "worker", proc.pid, node, str(log), queue)

    def _worker_env(self) -> dict[str, str]:
        env = dict(os.environ)
        if self.settings.source is not None:
            env["SLUICE_CONFIG"] = str(self.settings.source)
        env.setdefault("SLUICE_STATE_DIR", str(self.settings.state_dir))
        return env

    def _wait_for_workers(self, components: dict[str, Component]) -> None:
        pending = {c.address: c for c in components.values() if c.kind == "worker"}
        app = self.control_app()
        answered: set[str] = set()

        def all_answered() -> bool:
            for component in pending.values():
                if component.pid is not None and not process.is_alive(component.pid):
                    raise StackError(
                        f"{component.name} exited during start-up; see {component.log}"
                    )
            answered.update(workers.ping(app, [a for a in pending if a not in answered]))
            return answered == set(pending)

        try:
            process.wait_for(all_answered, 60, "Celery workers")
        except StackError as exc:
            missing = [pending[a] for a in pending if a not in answered]
            if not missing:
                raise
            names = ", ".join(f"{c.name} (log {c.log})" for c in missing)
            raise StackError(f"{exc}: no answer from {names}") from None

    # -- down ------------------------------------------------------------

    def down(self) -> list[Component]:
        """Stop exactly what ``up`` started, workers first."""
        components = self.load()
        stopped = []
        order = sorted(components.values(), key=lambda c: c.kind != "worker")
        for component in order:
            if component.pid is not None and process.is_alive(component.pid):
                process.stop_group(component.pid, timeout=15)
                stopped.append(component)
        self.stack_file.unlink(missing_ok=True)
        return stopped

    # -- status ----------------------------------------------------------

    def status(self) -> list[ComponentStatus]:
        components = self.load()
        app = self.control_app()
        worker_nodes = [c.address for c in components.values() if c.kind == "worker"]
        answering = workers.ping(app, worker_nodes) if worker_nodes else set()
        result = []
        for component in components.values():
            running = self._running(component)
            if component.kind == "zookeeper":
                host, port = component.address.rsplit(":", 1)
                healthy = zk_service.is_healthy(host, int(port))
            elif component.kind == "redis":
                healthy = redis_service.ping(self.settings.broker_url)
            else:
                healthy = running and component.address in answering
            result.append(ComponentStatus(component, running, healthy))
        return result

    # -- helpers ------------------------------------------------------------

    def zookeeper_address(self) -> tuple[str, int]:
        first = self.settings.zookeeper.hosts.split(",")[0].split("/")[0]
        host, _, port = first.rpartition(":")
        return (host or "127.0.0.1"), int(port or 2181)

    def control_app(self) -> Celery:
        app = Celery("sluice-control", set_as_current=False)
        app.conf.update(
            broker_url=self.settings.broker_url,
            broker_connection_retry=False,
            broker_connection_timeout=2,
        )
        return app

    @staticmethod
    def _running(component: Component) -> bool:
        return component.pid is None or process.is_alive(component.pid)


def describe(statuses: list[ComponentStatus]) -> str:
    """The ``sluice stack status`` table."""
    rows = [("COMPONENT", "PID", "ADDRESS", "STATE", "LOG")]
    for st in statuses:
        c = st.component
        pid = str(c.pid) if c.pid is not None else "(reused)"
        rows.append((c.name, pid, c.address, st.state, c.log))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in rows
    )


def stack_paths(settings: Settings) -> dict[str, Path]:
    return {"state": settings.state_dir, "logs": settings.log_dir, "run": settings.run_dir}
