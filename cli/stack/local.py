"""``sluice stack up | down | status``: the local stack under the state dir.

``up`` starts what is missing: a ZooKeeper server (Debian's package, own data
dir and port) closed to clients without Sluice's password (digest ACLs,
:func:`LocalStack._close_zookeeper`), Redis (a reachable one at the
configured URL is reused if it asks for a password; one it starts asks for
the broker's password, made once and kept in ``<state_dir>/broker.password``),
and one ``celery worker`` per queue, and ``sluice web`` on ``web.listen``.
What would run open is refused before anything starts, and the state dir
is made private (:mod:`cli.stack.closed`). It waits by probing (``ruok``,
``PING``, Celery ping, the web port) and fails naming the component and its
log file. What ``up`` started is recorded in ``<state_dir>/run/stack.json``
with each process's identity (start time, boot, executable), so ``down``
stops exactly that and nothing else: a pid that is now another process's is
reported and left alone. A second ``up`` is harmless.
"""

from __future__ import annotations

import fcntl
import json
import os
import secrets
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from celery import Celery

from cli.stack import closed, process, workers
from cli.stack import flower as flower_service
from cli.stack import redis as redis_service
from cli.stack import zookeeper as zk_service
from scheduler.errors import StackError
from scheduler.settings import exposure
from scheduler.settings.exposure import with_zookeeper_auth
from scheduler.settings.reader import read_password_file
from scheduler.settings.sections import Settings, ZooKeeperAuth
from scheduler.zk import acls

SUPERVISOR = "supervisor"
FLOWER = "flower"
WEB = "web"
# the keystore password the stack makes when sluice.yaml configures none
KEYSTORE_PASSWORD_FILE = "keystore.password"
# where ``python -m cli.stack.supervisor`` is importable from
PROJECT_ROOT = Path(__file__).resolve().parents[2]
# the superuser of the stack's ZooKeeper (its password beside the server's zoo.cfg)
ZOOKEEPER_SUPER_USER = "super"
ZOOKEEPER_SUPER_FILE = "super.password"
# what the stack's ZooKeeper answers of the four-letter words: health and counts only
ZOOKEEPER_FOUR_LETTER_WORDS = "ruok,srvr,mntr"


@dataclass
class StackEntry:
    """One entry of the stack file: a process ``up`` started or a reused service."""

    name: str
    kind: str  # zookeeper | redis | worker | supervisor | flower | web
    pid: int | None  # None: an existing service that ``up`` reused
    address: str  # host:port, or the Celery node name of a worker
    log: str = ""
    queues: str = ""
    # restarts by the supervisor: how many, when the last was, how it had ended
    restarts: int = 0
    restarted_at: float = 0.0
    last_exit: str = ""
    # the process's identity when it was started (process.Identity)
    start_time: int = 0
    boot_id: str = ""
    exe: str = ""

    @classmethod
    def started(
        cls, name: str, kind: str, pid: int, address: str, log: str, *, queues: str = ""
    ) -> StackEntry:
        """The entry of a process spawned just now, with its identity."""
        found = process.identity(pid) or process.Identity(0, "", "")
        return cls(
            name, kind, pid, address, log, queues,
            start_time=found.start_time, boot_id=found.boot_id, exe=found.exe,
        )  # fmt: skip

    def identity(self) -> process.Identity:
        return process.Identity(self.start_time, self.boot_id, self.exe)

    def not_ours(self) -> str | None:
        """Why the process of this entry may not be signalled (None: it is ours)."""
        if self.pid is None:
            return "not started by the stack"
        return process.mismatch(self.pid, self.identity())


@dataclass
class StackEntryStatus:
    component: StackEntry
    running: bool
    healthy: bool

    @property
    def state(self) -> str:
        if self.healthy:
            return "healthy"
        return "unhealthy" if self.running else "stopped"


class LocalStack:
    """The local stack described by ``settings`` and recorded in its stack file."""

    def __init__(
        self,
        settings: Settings,
        worker_concurrency: int = 2,
        executor_concurrency: int = workers.EXECUTOR_CONCURRENCY,
    ) -> None:
        self.settings = settings
        self.worker_concurrency = worker_concurrency
        self.executor_concurrency = executor_concurrency
        self.stack_file = settings.run_dir / "stack.json"
        # user:password of a Flower that ``up`` started just now (printed once)
        self.flower_login: str | None = None
        # what ``up`` wants the operator to know (nodes it closed, a password in the clear)
        self.notes: list[str] = []
        # what ``down`` did not stop: processes it cannot prove are the ones ``up`` started
        self.left_alone: list[str] = []

    # -- the record of what we started ----------------------------------

    @contextmanager
    def locked(self) -> Iterator[None]:
        """Exclusive use of the stack file (``up``, ``down`` and the supervisor share it)."""
        process.private_dir(self.stack_file.parent)
        fd = process.open_private(self.stack_file.with_suffix(".lock"), os.O_RDWR | os.O_CREAT)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def load(self) -> dict[str, StackEntry]:
        try:
            raw = json.loads(self.stack_file.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            raise StackError(f"{self.stack_file}: unreadable stack file: {exc}") from None
        return {entry["name"]: StackEntry(**entry) for entry in raw.get("components", [])}

    def save(self, components: dict[str, StackEntry]) -> None:
        process.private_dir(self.stack_file.parent)
        tmp = self.stack_file.with_suffix(".tmp")
        data = {"components": [asdict(c) for c in components.values()]}
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
        with os.fdopen(process.open_private(tmp, flags), "w") as out:
            out.write(json.dumps(data, indent=2) + "\n")
        tmp.replace(self.stack_file)

    # -- up ---------------------------------------------------------------

    def up(self, *, flower: bool = False) -> list[StackEntry]:
        """Start every missing component and wait until all are healthy.

        Then a supervisor keeps the workers alive (``cli/stack/supervisor.py``);
        with ``flower``, Flower watches the broker (:attr:`flower_login` holds
        the credentials of a Flower started now, to print once).
        """
        self.flower_login = None
        # refused before anything starts: nothing runs open (cli/stack/closed.py)
        self.notes = closed.refuse_open(self.settings, flower=flower)
        closed.private_state_dir(self.settings)
        with self.locked():
            password_file = keystore_password_file(self.settings)
            if password_file is not None:
                ensure_password_file(password_file)
            self._zookeeper_identity()
            components = self.load()
            try:
                for component in self._start_services(components):
                    components[component.name] = component
                    self.save(components)
                for component in self._start_workers(components):
                    components[component.name] = component
                    self.save(components)
                self._wait_for_workers(components)
                supervisor = components.get(SUPERVISOR)
                if supervisor is None or not self._running(supervisor):
                    components[SUPERVISOR] = self._start_supervisor()
                current = components.get(FLOWER)
                if flower and (current is None or not self._running(current)):
                    components[FLOWER] = self._start_flower()
                current = components.get(WEB)
                if current is None or not self._running(current):
                    components[WEB] = self._start_web()
            finally:
                self.save(components)
        return list(components.values())

    def _start_flower(self) -> StackEntry:
        """Flower on ``flower.listen``, behind the configured login or one made now."""
        log = self.settings.log_dir / "flower.log"
        started = flower_service.start(self.settings.flower, self._worker_env(), log, PROJECT_ROOT)
        self.flower_login = started.generated_login
        return StackEntry.started(FLOWER, "flower", started.pid, started.address, str(log))

    def _start_web(self) -> StackEntry:
        """``sluice web`` on ``web.listen`` (127.0.0.1:9000 unless configured)."""
        host, port = self.settings.web.host, self.settings.web.port
        address = f"http://{host}:{port}"
        if process.port_open(host, port):
            raise StackError(
                f"web: port {host}:{port} is taken; free it or set web.listen in sluice.yaml"
            )
        log = self.settings.log_dir / "web.log"
        argv = [sys.executable, "-m", "cli", "web", "--listen", f"{host}:{port}"]
        proc = process.spawn(argv, log, env=self._worker_env(), cwd=PROJECT_ROOT)
        process.wait_for(
            lambda: process.port_open(host, port),
            60,
            "sluice web",
            log_file=log,
            alive=lambda: process.is_alive(proc.pid),
        )
        return StackEntry.started(WEB, "web", proc.pid, address, str(log))

    def _start_supervisor(self) -> StackEntry:
        log = self.settings.log_dir / "supervisor.log"
        argv = [sys.executable, "-m", "cli.stack.supervisor"]
        argv += [str(self.worker_concurrency), str(self.executor_concurrency)]
        proc = process.spawn(argv, log, env=self._worker_env(), cwd=PROJECT_ROOT)
        return StackEntry.started(SUPERVISOR, "supervisor", proc.pid, "-", str(log))

    def _start_services(self, known: dict[str, StackEntry]) -> Iterator[StackEntry]:
        host, port = self.zookeeper_address()
        current = known.get("zookeeper")
        if current is None or not (self._running(current) and zk_service.is_healthy(host, port)):
            current = self._start_zookeeper(host, port)
            if current.pid is None:  # a reused one is refused before it is recorded
                self._close_zookeeper(current)
            yield current
        self._close_zookeeper(current)
        current = known.get("redis")
        if not (current and self._running(current) and self._broker_answers()):
            yield self.start_redis()

    def _start_zookeeper(self, host: str, port: int) -> StackEntry:
        address = f"{host}:{port}"
        if zk_service.is_healthy(host, port):
            return StackEntry("zookeeper", "zookeeper", None, address)
        if process.port_open(host, port):
            raise StackError(
                f"ZooKeeper: port {address} is taken by something that does not answer "
                "'ruok'; free it or set zookeeper.hosts in sluice.yaml"
            )
        superuser = self._zookeeper_superuser()
        server = zk_service.ZooKeeperServer(
            data_dir=self.zookeeper_dir,
            port=port,
            host=host,
            four_letter_words=ZOOKEEPER_FOUR_LETTER_WORDS,
            super_digest=zk_service.super_digest(superuser.username, superuser.password),
        )
        pid = server.start()
        server.wait_ready(timeout=90)
        return StackEntry.started("zookeeper", "zookeeper", pid, address, str(server.log_file))

    @property
    def zookeeper_dir(self) -> Path:
        return self.settings.state_dir / "zookeeper"

    def _zookeeper_identity(self) -> None:
        """Sluice's ZooKeeper password: the configured one, else one made once in a file.

        From now on this process's clients use it, and every process that
        loads the same ``sluice.yaml`` finds it
        (:func:`scheduler.settings.exposure.with_zookeeper_auth`).
        """
        auth = self.settings.zookeeper.auth
        if auth is not None and auth.password:
            return
        # without zookeeper.auth the ZooKeeper is on loopback (closed.refuse_open)
        ensure_password_file(self.settings.zookeeper_password_file)
        self.settings = with_zookeeper_auth(self.settings)

    def _zookeeper_superuser(self) -> ZooKeeperAuth:
        """The superuser of the stack's ZooKeeper, its password made once (0600)."""
        path = self.zookeeper_dir / ZOOKEEPER_SUPER_FILE
        process.private_dir(self.zookeeper_dir)
        ensure_password_file(path)
        return ZooKeeperAuth(ZOOKEEPER_SUPER_USER, read_password_file(path), path)

    def _close_zookeeper(self, entry: StackEntry) -> None:
        """The stack's own ZooKeeper closed to all but Sluice; a reused one checked.

        Its own: ``/``, ``/zookeeper`` and every node of an older, open tree
        get Sluice's ACL (:func:`acls.close_server`, as the superuser when a
        node shuts Sluice out). A reused one must be closed already: one that
        lets anyone create nodes at ``/`` or read the chroot is refused.
        """
        where = f"ZooKeeper at {entry.address}"
        if entry.pid is None:
            found = acls.open_parts(self.settings.zookeeper)
            if found:
                raise StackError(
                    f"refusing to reuse the {where} (zookeeper.hosts), not started by the "
                    f"stack: {'; '.join(found)}; close it (ACL of / and of "
                    f"{self.settings.zookeeper.root}), or point zookeeper.hosts at a free "
                    "port so the stack starts its own"
                )
            return
        closing = acls.close_server(self.settings.zookeeper, [self._zookeeper_superuser()])
        if closing.refused:
            raise StackError(
                f"{where}: could not give Sluice's ACL to {', '.join(closing.refused[:5])}"
            )
        if closing.tree:
            self.notes.append(
                f"{where}: {len(closing.tree)} nodes given Sluice's ACL (a tree made without it)"
            )

    def start_redis(self) -> StackEntry:
        """The broker's Redis: one answering ``broker_url`` is reused, else one is started.

        The Redis the stack starts listens on the URL's loopback address and
        asks for the broker's password: the configured one, else a random
        one the stack writes once to ``<state_dir>/broker.password`` (0600)
        and reuses on every later start. Every process of the stack reads it
        from there (:func:`scheduler.settings.exposure.with_broker_password`).
        """
        url = self.settings.broker_url
        host, port = redis_service.host_port(url)
        address = f"{host}:{port}"
        failure = redis_service.probe(url, self._broker_ssl())
        if not failure:  # not an open one: closed.refuse_open refused that before
            return StackEntry("redis", "redis", None, address)
        where = f"Redis at {exposure.redact(url)}"
        if not exposure.is_loopback(host) or self._broker_ssl() is not None:
            raise StackError(f"{where}: {failure}; the stack starts a plain local Redis only")
        if process.port_open(host, port):
            raise StackError(f"{where}: {failure}; its port is taken by another server")
        server = redis_service.RedisServer(
            data_dir=self.settings.state_dir / "redis",
            port=port,
            host=host,
            password=self._broker_password(),
        )
        pid = server.start()
        server.wait_ready()
        return StackEntry.started("redis", "redis", pid, address, str(server.log_file))

    def _broker_password(self) -> str:
        """The password of the Redis the stack starts; made and kept in a file if none is set."""
        in_url = exposure.url_password(self.settings.broker_url)
        if in_url is not None:
            return unquote(in_url)
        if not exposure.broker_password(self.settings):
            ensure_password_file(self.settings.broker_password_file)
        # from now on this process's clients authenticate too
        self.settings = exposure.with_broker_password(self.settings)
        return exposure.broker_password(self.settings)

    def _broker_ssl(self) -> dict[str, Any] | None:
        return exposure.broker_ssl_options(self.settings.broker_url, self.settings.broker.tls)

    def _broker_answers(self) -> bool:
        return redis_service.ping(self.settings.broker_url, self._broker_ssl())

    def stack_queues(self) -> tuple[str, ...]:
        """The queues the stack runs a worker for: the core four, and a builder
        (``images:`` names disk images) and a launcher (``nodes:`` names
        providers) when the settings ask for them."""
        extra: list[str] = []
        if self.settings.images.diskimages:
            extra.append("builder")
        if self.settings.nodes.providers:
            extra.append("launcher")
        return (*workers.STACK_QUEUES, *extra)

    def _start_workers(self, known: dict[str, StackEntry]) -> Iterator[StackEntry]:
        for queue in self.stack_queues():
            current = known.get(f"worker-{queue}")
            if current and self._running(current):
                continue
            yield self.start_worker(queue)

    def start_worker(self, queue: str) -> StackEntry:
        """Spawn the stack's worker of ``queue`` (not waiting for it to answer)."""
        name = f"worker-{queue}"
        node = workers.node_name(f"sluice-{queue}")
        log = self.settings.log_dir / f"{name}.log"
        extra: list[str] = []
        if queue == "maintenance":
            # The timer for periodic sweeps runs beside the maintenance worker.
            schedule = self.settings.run_dir / "celerybeat-schedule"
            extra = ["--beat", "--schedule", str(schedule)]
        concurrency = self.executor_concurrency if queue == "executor" else self.worker_concurrency
        argv = workers.worker_command([queue], node, concurrency=concurrency, extra=extra)
        proc = process.spawn(argv, log, env=self._worker_env())
        return StackEntry.started(name, "worker", proc.pid, node, str(log), queues=queue)

    def _worker_env(self) -> dict[str, str]:
        env = dict(os.environ)
        if self.settings.source is not None:
            env["SLUICE_CONFIG"] = str(self.settings.source)
        env.setdefault("SLUICE_STATE_DIR", str(self.settings.state_dir))
        keystore = self.settings.keystore
        if not keystore.password and keystore.password_file is None:
            env["SLUICE_KEYSTORE_PASSWORD_FILE"] = str(keystore_password_file(self.settings))
        return env

    def _wait_for_workers(self, components: dict[str, StackEntry]) -> None:
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

    def down(self) -> list[StackEntry]:
        """Stop exactly what ``up`` started: the supervisor, then workers, then services.

        A process is signalled (its whole group) only while it is provably the
        one ``up`` started (:meth:`StackEntry.not_ours`); any other is named in
        :attr:`left_alone` and left running.
        """
        self.left_alone = []
        with self.locked():
            components = self.load()
        stopped = []
        rank = {"supervisor": 0, "flower": 1, "web": 1, "worker": 2}
        order = sorted(components.values(), key=lambda c: rank.get(c.kind, 3))
        for component in order:
            if component.pid is None or not process.is_alive(component.pid):
                continue
            why = component.not_ours()
            if why is not None:
                self.left_alone.append(f"{component.name} (pid {component.pid}): {why}")
                continue
            process.stop_group(component.pid, timeout=15, recorded=component.identity())
            stopped.append(component)
        self.stack_file.unlink(missing_ok=True)
        return stopped

    # -- status ----------------------------------------------------------

    def status(self) -> list[StackEntryStatus]:
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
                healthy = self._broker_answers()
            elif component.kind == "worker":
                healthy = running and component.address in answering
            elif component.kind == "web":
                healthy = running and process.port_open(
                    self.settings.web.host, self.settings.web.port
                )
            else:
                healthy = running
            result.append(StackEntryStatus(component, running, healthy))
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
            broker_use_ssl=self._broker_ssl() or False,
            broker_connection_retry=False,
            broker_connection_timeout=2,
        )
        return app

    @staticmethod
    def _running(component: StackEntry) -> bool:
        return running(component)


def running(component: StackEntry) -> bool:
    """True while the process of ``component`` runs (a reused service counts as running).

    A pid that is now another process's does not count; an entry written
    before identities were recorded counts while its pid is alive.
    """
    if component.pid is None:
        return True
    if not component.start_time:
        return process.is_alive(component.pid)
    return process.is_alive(component.pid) and component.not_ours() is None


def keystore_password_file(settings: Settings) -> Path | None:
    """The keystore password file of the stack: the configured one, else one in the state dir.

    None when ``sluice.yaml`` gives the password inline.
    """
    keystore = settings.keystore
    if keystore.password_file is not None:
        return keystore.password_file
    if keystore.password:
        return None
    return settings.state_dir / KEYSTORE_PASSWORD_FILE


def ensure_password_file(path: Path) -> bool:
    """Write a random password to ``path`` (mode 0600) unless it holds one; True if written.

    A password in use is never replaced: the private keys in ZooKeeper are
    encrypted with it, and only it opens them.
    """
    if read_password_file(path):
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = process.open_private(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    with os.fdopen(fd, "w") as out:
        out.write(secrets.token_urlsafe(32) + "\n")
    return True


def describe(statuses: list[StackEntryStatus]) -> str:
    """The ``sluice stack status`` table."""
    rows = [("COMPONENT", "PID", "ADDRESS", "STATE", "RESTARTS", "LOG")]
    for st in statuses:
        c = st.component
        pid = str(c.pid) if c.pid is not None else "(reused)"
        restarts = str(c.restarts)
        if c.restarts:
            when = time.strftime("%H:%M:%S", time.localtime(c.restarted_at))
            restarts = f"{c.restarts} (last {when}, {c.last_exit})"
        rows.append((c.name, pid, c.address, st.state, restarts, c.log))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in rows
    )


def stack_paths(settings: Settings) -> dict[str, Path]:
    return {"state": settings.state_dir, "logs": settings.log_dir, "run": settings.run_dir}
