"""The settings as values: one frozen dataclass per section of ``sluice.yaml``.

:class:`Settings` is the whole file once read; each section is its own
dataclass (``zookeeper:``, ``executor:``, ``web:``, ...), with the defaults
that apply when the file leaves it out. The ``images:`` and ``nodes:``
sections live with their readers (:mod:`scheduler.settings.images`,
:mod:`scheduler.settings.nodes`). Nothing here reads a file or the
environment: :func:`scheduler.settings.load.load_settings` does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scheduler.errors import SettingsError
from scheduler.settings.images import ImageSettings
from scheduler.settings.nodes import NodeSettings

# the broker password the local stack makes for the Redis it starts
BROKER_PASSWORD_FILE = "broker.password"
# ... and the ZooKeeper password of its identity (user ZOOKEEPER_USER) on a loopback ZooKeeper
ZOOKEEPER_PASSWORD_FILE = "zookeeper.password"
ZOOKEEPER_USER = "sluice"


@dataclass(frozen=True)
class ZooKeeperAuth:
    """Digest authentication for the ZooKeeper client (``zookeeper.auth``).

    ``password`` is inline or the first line of ``password_file`` ("" while
    that file is missing: :func:`scheduler.zk.client.connect` refuses it).
    """

    username: str
    password: str
    password_file: Path | None = None


@dataclass(frozen=True)
class TLSSettings:
    """TLS options of a client: ZooKeeper's (``zookeeper.tls``), the broker's (``broker.tls``).

    Paths are already absolute; ``verify`` false accepts any server certificate.
    """

    ca: str | None = None
    cert: str | None = None
    key: str | None = None
    verify: bool = True


@dataclass(frozen=True)
class ZooKeeperSettings:
    hosts: str = "127.0.0.1:2181"
    root: str = "/sluice"
    session_timeout: float = 10.0
    # Deadline for a single ZooKeeper call; none may block forever.
    call_timeout: float = 10.0
    auth: ZooKeeperAuth | None = None
    tls: TLSSettings | None = None


@dataclass(frozen=True)
class ConnectionSettings:
    name: str
    driver: str
    baseurl: str = ""
    options: Mapping[str, Any] = field(default_factory=dict)

    def project_url(self, project: str) -> str:
        """Where ``project`` of this connection lives: ``<baseurl>/<project>``."""
        return self.baseurl.rstrip("/") + "/" + project


@dataclass(frozen=True)
class SandboxLimits:
    """Resource limits of every process of a sandboxed step (0: no limit).

    ``processes`` counts the build's own processes (a root executor gives
    each build a host uid of its own); memory is address space per process
    (``RLIMIT_AS``), file size per file written. A process over a limit
    fails its fork, allocation or write, and its step fails with it; the
    executor and other builds go on (``executor.sandbox_limits``).
    """

    processes: int = 1024
    memory_mb: int = 8192
    file_size_mb: int = 8192
    open_files: int = 4096


SANDBOX_NETWORKS = ("loopback", "nodes", "host")


@dataclass(frozen=True)
class ExecutorSettings:
    """How an executor runs jobs (``executor:`` in ``sluice.yaml``, docs/executor.md).

    The defaults are the job runner's (``workers.executor.RunnerOptions``).
    """

    # Seconds between two polls of the cancel flag while a step runs.
    poll_interval: float = 0.2
    # Seconds between SIGTERM and SIGKILL when a step's tree is stopped.
    kill_grace: float = 1.0
    # Borrow a local source's objects (fast) rather than fetch them.
    share_objects: bool = True
    # Lines of the log's end kept in the result.
    tail_lines: int = 50
    # Bytes of result data a job may write.
    result_data_limit: int = 1024 * 1024
    # Characters of job output kept in job-output.txt (0: no limit).
    log_limit: int = 256 * 1024 * 1024
    # "bwrap": jobs run in bubblewrap, seeing only their own build (docs/executor.md);
    # "none" runs them unconfined as the worker's user
    sandbox: str = "bwrap"
    # host folders a sandboxed job may write besides its own build (a shared cache)
    sandbox_writable: tuple[Path, ...] = ()
    # which steps share the host's network: "loopback" (none: each step has
    # its own loopback), "nodes" (the steps of a build with nodes), "host" (all)
    sandbox_network: str = "loopback"
    # processes, memory, file size and open files of a sandboxed step
    sandbox_limits: SandboxLimits = field(default_factory=SandboxLimits)
    # Always merge an item's changes again in this executor's own repo cache,
    # even where the merger's cache is readable (an executor on another host
    # does it anyway when the commits are missing: workers/executor/speculation.py)
    merge_here: bool = False
    # Where builds' workspaces live (None: ``<state_dir>/builds``); scratch
    # space, removed after each build: a tmpfs suits it (docs/executor.md)
    build_dir: Path | None = None
    # Keep a finished workspace as its process's spare and prune it for the
    # next build instead of deleting it (docs/executor.md, "Recycled workspaces")
    recycle_workspaces: bool = True


@dataclass(frozen=True)
class Authenticator:
    """One way to check an admin's JWT (``web.authenticators`` in ``sluice.yaml``).

    ``algorithm`` HS256 checks the signature with ``secret``; RS256 with the
    PEM public key at ``public_key``. ``issuer`` and ``audience``, when set,
    must match the token's ``iss`` and ``aud`` claims. ``skew`` and
    ``max_validity_time`` are Zuul's options of the same names (docs/web.md).
    """

    name: str
    algorithm: str
    secret: str = ""
    public_key: str = ""
    issuer: str = ""
    audience: str = ""
    # the claim naming the user in logs and outcomes
    uid_claim: str = "sub"
    # seconds: a token must carry ``iat`` and is refused once issued longer ago,
    # or when made to last longer (``exp - iat``); 0: no limit but ``exp``
    max_validity_time: float = 0.0
    # seconds of clock difference allowed to the token's issuer (exp, nbf, iat)
    skew: int = 0


class ListenAddress:
    """``host`` and ``port`` of a listener's ``listen`` (``HOST:PORT``)."""

    listen: str

    @property
    def host(self) -> str:
        return self.listen.rsplit(":", 1)[0]

    @property
    def port(self) -> int:
        return int(self.listen.rsplit(":", 1)[1])


@dataclass(frozen=True)
class WebSettings(ListenAddress):
    """The HTTP face (``web:`` in ``sluice.yaml``, docs/web.md)."""

    listen: str = "127.0.0.1:9000"
    # how users reach it (links in reports); "" means http://<listen>
    public_url: str = ""
    # reads need a valid token too (admin verbs always do)
    protect_reads: bool = False
    authenticators: tuple[Authenticator, ...] = ()
    # serve outside loopback with no authenticator (admin verbs all refused);
    # without it such a web refuses to start (scheduler/settings/exposure.py)
    allow_unauthenticated: bool = False

    @property
    def url(self) -> str:
        return (self.public_url or f"http://{self.listen}").rstrip("/")


@dataclass(frozen=True)
class KeystoreSettings:
    """The password that encrypts the projects' private keys in ZooKeeper (``keystore:``).

    Inline, or the first line of ``password_file``; "" when not configured
    or the file is missing: only what needs keys asks (:meth:`require_password`).
    """

    password: str = ""
    password_file: Path | None = None

    def require_password(self) -> str:
        """The password; :class:`SettingsError` naming the setting when there is none."""
        if self.password:
            return self.password
        if self.password_file is not None:
            raise SettingsError(
                f"keystore.password_file: {self.password_file} is missing or empty "
                "(`sluice stack up` writes the local stack's)"
            )
        raise SettingsError(
            "no keystore password: set keystore.password or keystore.password_file in sluice.yaml"
        )


@dataclass(frozen=True)
class BrokerSettings:
    """The broker's and result backend's password and TLS (``broker:`` in ``sluice.yaml``).

    The password goes into ``broker_url`` when that names none
    (:func:`scheduler.settings.exposure.with_broker_password`): inline, or the first line of
    ``password_file``. Without either, a loopback broker uses the local
    stack's ``<state_dir>/broker.password`` if it exists. ``fast_send``
    false sends every task through Celery, with its ``task-sent`` event
    (docs/celery.md).
    """

    password: str = ""
    password_file: Path | None = None
    # a rediss:// broker: its CA, our certificate and key (Celery's broker_use_ssl)
    tls: TLSSettings | None = None
    # a plain redis:// broker: push task messages ourselves (scheduler/nudge/kept_connection.py,
    # scheduler/nudge/fresh_socket.py), without Celery's task-sent event; false: Celery sends all
    fast_send: bool = True


@dataclass(frozen=True)
class FlowerSettings(ListenAddress):
    """The local stack's Flower (``flower:``): where it listens and who may log in.

    ``basic_auth_file`` holds ``user:password`` lines. Without one the stack
    makes a login and prints it once; outside loopback one is required.
    """

    # port 0: a free port, picked at start
    listen: str = "127.0.0.1:0"
    basic_auth_file: Path | None = None


@dataclass(frozen=True)
class Settings:
    zookeeper: ZooKeeperSettings
    broker_url: str
    database_url: str
    state_dir: Path
    tenant_config: Path
    connections: Mapping[str, ConnectionSettings]
    # Seconds between maintenance sweeps (re-nudges, lost-request detection).
    sweep_interval: float = 10.0
    # Redis visibility timeout: an unacknowledged message is redelivered
    # after this many seconds (see docs/celery.md on acks for builds).
    visibility_timeout: float = 3600.0
    executor: ExecutorSettings = field(default_factory=ExecutorSettings)
    # Worker log lines: "text" (Celery's format, for a terminal) or "json"
    # (one JSON object per line with the ids of what it is about).
    log_format: str = "text"
    web: WebSettings = field(default_factory=WebSettings)
    keystore: KeystoreSettings = field(default_factory=KeystoreSettings)
    broker: BrokerSettings = field(default_factory=BrokerSettings)
    flower: FlowerSettings = field(default_factory=FlowerSettings)
    # Disk images and their builders (scheduler/settings/images.py, docs/nodes.md).
    images: ImageSettings = field(default_factory=ImageSettings)
    # Node providers and their launchers (scheduler/settings/nodes.py, docs/nodes.md).
    nodes: NodeSettings = field(default_factory=NodeSettings)
    # Where the settings came from (None: built-in defaults only).
    source: Path | None = None

    @property
    def log_dir(self) -> Path:
        return self.state_dir / "logs"

    @property
    def run_dir(self) -> Path:
        return self.state_dir / "run"

    @property
    def broker_password_file(self) -> Path:
        """Where the broker's password is kept: ``broker.password_file``, else the stack's."""
        return self.broker.password_file or self.state_dir / BROKER_PASSWORD_FILE

    @property
    def zookeeper_password_file(self) -> Path:
        """ZooKeeper's password file: ``zookeeper.auth.password_file``, else the stack's."""
        auth = self.zookeeper.auth
        if auth is not None and auth.password_file is not None:
            return auth.password_file
        return self.state_dir / ZOOKEEPER_PASSWORD_FILE
