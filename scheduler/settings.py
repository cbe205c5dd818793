"""Process settings: ``sluice.yaml``, its defaults and environment overrides.

One file configures every Sluice process. It is found through ``--config``
(the CLI sets ``SLUICE_CONFIG``), the ``SLUICE_CONFIG`` environment variable,
or ``./sluice.yaml``; without any, working local defaults apply. Relative
paths in the file resolve against the file's folder; without a file, against
the working directory.

Unknown keys and wrong types are errors naming the file, line and key: a
typo in a setting must never silently fall back to a default.

Environment variables override the file (for containers and tests):
``SLUICE_ZK_HOSTS``, ``SLUICE_ZK_ROOT``, ``SLUICE_ZK_SESSION_TIMEOUT``,
``SLUICE_BROKER_URL``, ``SLUICE_DATABASE_URL``, ``SLUICE_STATE_DIR``,
``SLUICE_TENANT_CONFIG``, ``SLUICE_SWEEP_INTERVAL``, ``SLUICE_WEB_LISTEN``,
``SLUICE_KEYSTORE_PASSWORD_FILE``, ``SLUICE_BROKER_PASSWORD_FILE``, ``SLUICE_ZK_PASSWORD_FILE``,
``SLUICE_SANDBOX_WRITABLE`` (folders joined by ``:``), ``SLUICE_FAST_SEND``
(``0`` or ``1``: ``broker.fast_send``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from scheduler import exposure
from scheduler.errors import SettingsError
from scheduler.image_settings import ImageSettings, read_images
from scheduler.node_settings import NodeSettings, read_nodes
from scheduler.settings_env import apply_environment, check_log_format
from scheduler.settings_yaml import SettingsReader, load_mapping, read_password_file, resolve_path

CONFIG_ENV = "SLUICE_CONFIG"
DEFAULT_CONFIG_NAME = "sluice.yaml"
DEFAULT_STATE_DIR = ".sluice"
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
    # without it such a web refuses to start (scheduler/exposure.py)
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
    (:func:`scheduler.exposure.with_broker_password`): inline, or the first line of
    ``password_file``. Without either, a loopback broker uses the local
    stack's ``<state_dir>/broker.password`` if it exists. ``fast_send``
    false sends every task through Celery, with its ``task-sent`` event
    (docs/celery.md).
    """

    password: str = ""
    password_file: Path | None = None
    # a rediss:// broker: its CA, our certificate and key (Celery's broker_use_ssl)
    tls: TLSSettings | None = None
    # a plain redis:// broker: push task messages ourselves (scheduler/fastsend.py,
    # scheduler/quicksend.py), without Celery's task-sent event; false: Celery sends all
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
    # Disk images and their builders (scheduler/image_settings.py, docs/nodes.md).
    images: ImageSettings = field(default_factory=ImageSettings)
    # Node providers and their launchers (scheduler/node_settings.py, docs/nodes.md).
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


# --------------------------------------------------------------------------
# Loading


def _resolve_database_url(url: str, base: Path) -> str:
    prefix = "sqlite:///"
    if url.startswith(prefix) and not url.startswith(prefix + "/") and url != "sqlite://":
        rest = url[len(prefix) :]
        if rest and rest != ":memory:":
            return prefix + os.path.normpath(base / rest)
    return url


def _resolve_baseurl(value: str, base: Path) -> str:
    if "://" in value or (":" in value.split("/", 1)[0] and "@" in value):
        return value  # file://, ssh://, https://, user@host:path
    return str(resolve_path(value, base))


def _read_zookeeper(reader: SettingsReader | None, base: Path) -> ZooKeeperSettings:
    if reader is None:
        return ZooKeeperSettings()
    hosts = reader.get("hosts", str, ZooKeeperSettings.hosts)
    root = reader.get("root", str, ZooKeeperSettings.root)
    if not root.startswith("/") or (root.endswith("/") and root != "/"):
        raise reader.error("root", f"must be an absolute path without a trailing '/', got {root!r}")
    session_timeout = reader.get("session_timeout", float, ZooKeeperSettings.session_timeout)
    if session_timeout <= 0:
        raise reader.error("session_timeout", "must be positive")
    call_timeout = reader.get("call_timeout", float, session_timeout)
    auth = None
    auth_reader = reader.sub("auth")
    if auth_reader is not None:
        username = auth_reader.get("username", str, "")
        password, path = _read_password(auth_reader, base)
        auth_reader.finish()
        if not username:
            raise reader.error("auth", "needs a username")
        if path is not None:
            password = read_password_file(path, "zookeeper.auth.password_file")
        auth = ZooKeeperAuth(username, password, path)
    tls = _read_tls(reader.sub("tls"), base)
    reader.finish()
    return ZooKeeperSettings(hosts, root, session_timeout, call_timeout, auth, tls)


def _read_tls(reader: SettingsReader | None, base: Path) -> TLSSettings | None:
    """A ``tls:`` section (``ca``, ``cert``, ``key``, ``verify``), paths resolved."""
    if reader is None:
        return None

    def path(key: str) -> str | None:
        assert reader is not None
        value = reader.get(key, str, None)
        return None if value is None else str(resolve_path(value, base))

    tls = TLSSettings(
        ca=path("ca"), cert=path("cert"), key=path("key"), verify=reader.get("verify", bool, True)
    )
    reader.finish()
    return tls


def _read_connections(reader: SettingsReader | None, base: Path) -> dict[str, ConnectionSettings]:
    if reader is None:
        return {}
    connections: dict[str, ConnectionSettings] = {}
    for name in list(reader.data):
        sub = reader.sub(name)
        if sub is None:
            raise reader.error(name, "expected a mapping with at least 'driver'")
        driver = sub.get("driver", str, None)
        if driver is None:
            raise reader.error(name, "needs a 'driver'")
        baseurl = sub.get("baseurl", str, "")
        if driver == "git":
            if not baseurl:
                raise sub.error("driver", "a git connection needs a 'baseurl'")
            baseurl = _resolve_baseurl(baseurl, base)
            options: dict[str, Any] = _git_polling(sub)
            sub.finish()
        else:
            if baseurl:  # where the forge's repositories are cloned from
                baseurl = _resolve_baseurl(baseurl, base)
            options = {k: v for k, v in sub.data.items() if k not in sub.used}
            if isinstance(options.get("app_key"), str):  # a GitHub App's key, beside sluice.yaml
                options["app_key"] = str(resolve_path(options["app_key"], base))
        connections[name] = ConnectionSettings(name, driver, baseurl, options)
    return connections


# Zuul's git driver polls every two hours by default.
DEFAULT_POLL_DELAY = 7200.0


def _git_polling(sub: SettingsReader) -> dict[str, Any]:
    """A git connection's polling: ``poll_delay`` seconds (0: never), ``poll_partitions``."""
    delay = sub.get("poll_delay", float, DEFAULT_POLL_DELAY)
    if delay < 0:
        raise sub.error("poll_delay", "must not be negative (0 turns polling off)")
    partitions = sub.get("poll_partitions", int, 1)
    if not 1 <= partitions <= 1024:
        raise sub.error("poll_partitions", "must be between 1 and 1024")
    return {"poll_delay": delay, "poll_partitions": partitions}


def _read_executor(reader: SettingsReader | None) -> ExecutorSettings:
    if reader is None:
        return ExecutorSettings()
    default = ExecutorSettings()
    poll_interval = reader.get("poll_interval", float, default.poll_interval)
    if poll_interval <= 0:
        raise reader.error("poll_interval", "must be positive")
    kill_grace = reader.get("kill_grace", float, default.kill_grace)
    if kill_grace < 0:
        raise reader.error("kill_grace", "must not be negative")
    if poll_interval + kill_grace >= 2.0:
        # A cancel must stop a build within 2 s.
        raise reader.error("kill_grace", "poll_interval + kill_grace must stay below 2 seconds")
    counts = {}
    for key, minimum in (("tail_lines", 0), ("result_data_limit", 1), ("log_limit", 0)):
        counts[key] = reader.get(key, int, getattr(default, key))
        if counts[key] < minimum:
            raise reader.error(key, f"must be at least {minimum}")
    share_objects = reader.get("share_objects", bool, default.share_objects)
    recycle = reader.get("recycle_workspaces", bool, default.recycle_workspaces)
    merge_here = reader.get("merge_here", bool, default.merge_here)
    sandbox = reader.get("sandbox", str, default.sandbox)
    if sandbox not in ("none", "bwrap"):
        raise reader.error("sandbox", f"expected none or bwrap, got {sandbox!r}")
    listed = reader.get("sandbox_writable", list, [])
    if not all(isinstance(p, str) and os.path.isabs(p) for p in listed):
        raise reader.error("sandbox_writable", "expected a list of absolute paths")
    network = reader.get("sandbox_network", str, default.sandbox_network)
    if network not in SANDBOX_NETWORKS:
        raise reader.error("sandbox_network", f"expected loopback, nodes or host, got {network!r}")
    limits = _read_sandbox_limits(reader.sub("sandbox_limits"))
    build_dir = reader.get("build_dir", str, "")
    if build_dir and not os.path.isabs(build_dir):
        raise reader.error("build_dir", f"expected an absolute path, got {build_dir!r}")
    reader.finish()
    return ExecutorSettings(
        poll_interval=poll_interval,
        kill_grace=kill_grace,
        share_objects=share_objects,
        sandbox=sandbox,
        sandbox_writable=tuple(Path(p) for p in listed),
        sandbox_network=network,
        sandbox_limits=limits,
        merge_here=merge_here,
        build_dir=Path(build_dir) if build_dir else None,
        recycle_workspaces=recycle,
        **counts,
    )


def _read_sandbox_limits(reader: SettingsReader | None) -> SandboxLimits:
    """``executor.sandbox_limits``: each a count (0: no limit)."""
    default = SandboxLimits()
    if reader is None:
        return default
    found = {}
    for key in ("processes", "memory_mb", "file_size_mb", "open_files"):
        found[key] = reader.get(key, int, getattr(default, key))
        if found[key] < 0:
            raise reader.error(key, "must not be negative (0: no limit)")
    if 0 < found["processes"] < 16:
        raise reader.error("processes", "must be 0 or at least 16 (a shell and its pipes)")
    reader.finish()
    return SandboxLimits(**found)


ALGORITHMS = ("HS256", "RS256")


def _read_authenticator(reader: SettingsReader, index: int, base: Path) -> Authenticator:
    name = reader.get("name", str, f"auth-{index}")
    algorithm = reader.get("algorithm", str, None)
    if algorithm not in ALGORITHMS:
        raise reader.error("algorithm", f"expected one of {', '.join(ALGORITHMS)}")
    secret = reader.get("secret", str, "")
    public_key = reader.get("public_key", str, "")
    if algorithm == "HS256" and not secret:
        raise reader.error("algorithm", "HS256 needs a 'secret'")
    if algorithm == "RS256":
        if not public_key:
            raise reader.error("algorithm", "RS256 needs a 'public_key' (a PEM file)")
        public_key = str(resolve_path(public_key, base))
    found = Authenticator(
        name=name,
        algorithm=algorithm,
        secret=secret,
        public_key=public_key,
        issuer=reader.get("issuer", str, ""),
        audience=reader.get("audience", str, ""),
        uid_claim=reader.get("uid_claim", str, "sub"),
        max_validity_time=float(reader.get("max_validity_time", (int, float), 0)),
        skew=reader.get("skew", int, 0),
    )
    if found.max_validity_time < 0:
        raise reader.error("max_validity_time", "expected a number of seconds above 0")
    if found.skew < 0:
        raise reader.error("skew", "expected a number of seconds, 0 or more")
    reader.finish()
    return found


def _read_listen(reader: SettingsReader, default: str, lowest_port: int = 1) -> str:
    listen: str = reader.get("listen", str, default)
    host, _, port = listen.rpartition(":")
    if not host or not port.isdigit() or not lowest_port <= int(port) < 65536:
        raise reader.error("listen", f"expected HOST:PORT, got {listen!r}")
    return listen


def _read_web(reader: SettingsReader | None, base: Path) -> WebSettings:
    if reader is None:
        return WebSettings()
    listen = _read_listen(reader, WebSettings.listen)
    reader.used.add("authenticators")
    entries = reader.data.get("authenticators") or []
    if not isinstance(entries, list):
        raise reader.error("authenticators", "expected a list of mappings")
    authenticators = []
    for index, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise reader.error("authenticators", f"entry {index + 1}: expected a mapping")
        sub = SettingsReader(entry, reader.where, f"{reader.prefix}authenticators[{index}].")
        authenticators.append(_read_authenticator(sub, index, base))
    found = WebSettings(
        listen=listen,
        public_url=reader.get("public_url", str, ""),
        protect_reads=reader.get("protect_reads", bool, False),
        authenticators=tuple(authenticators),
        allow_unauthenticated=reader.get("allow_unauthenticated", bool, False),
    )
    reader.finish()
    return found


def _read_flower(reader: SettingsReader | None, base: Path) -> FlowerSettings:
    if reader is None:
        return FlowerSettings()
    listen = _read_listen(reader, FlowerSettings.listen, lowest_port=0)
    auth_file = reader.get("basic_auth_file", str, None)
    reader.finish()
    return FlowerSettings(listen, None if auth_file is None else resolve_path(auth_file, base))


def _read_password(reader: SettingsReader, base: Path) -> tuple[str, Path | None]:
    """``password`` or ``password_file`` of a section (not both): the inline one, the path."""
    password = reader.get("password", str, "")
    password_file = reader.get("password_file", str, "")
    if password and password_file:
        raise reader.error("password_file", "give password or password_file, not both")
    return password, resolve_path(password_file, base) if password_file else None


def _read_keystore(reader: SettingsReader | None, base: Path) -> KeystoreSettings:
    if reader is None:
        return KeystoreSettings()
    password, path = _read_password(reader, base)
    reader.finish()
    if path is not None:
        return KeystoreSettings(read_password_file(path), path)
    return KeystoreSettings(password)


def _read_broker(reader: SettingsReader | None, base: Path, url: str) -> BrokerSettings:
    if reader is None:
        return BrokerSettings()
    password, path = _read_password(reader, base)
    if (password or path) and exposure.url_password(url) is not None:
        raise reader.error("password", "broker_url names a password already; give it once")
    tls = _read_tls(reader.sub("tls"), base)
    fast_send = reader.get("fast_send", bool, BrokerSettings.fast_send)
    reader.finish()
    return BrokerSettings(password, path, tls, fast_send)


def _from_mapping(data: dict[str, Any], where: str, base: Path) -> Settings:
    reader = SettingsReader(data, where)
    zookeeper = _read_zookeeper(reader.sub("zookeeper"), base)
    broker_url = reader.get("broker_url", str, "redis://127.0.0.1:6379/0")
    database_url = reader.get("database_url", str, None)
    state_dir = resolve_path(reader.get("state_dir", str, DEFAULT_STATE_DIR), base)
    if database_url is None:
        database_url = f"sqlite:///{state_dir / 'sluice.db'}"
    tenant_config = resolve_path(reader.get("tenant_config", str, "main.yaml"), base)
    connections = _read_connections(reader.sub("connections"), base)
    sweep_interval = reader.get("sweep_interval", float, 10.0)
    visibility_timeout = reader.get("visibility_timeout", float, 3600.0)
    executor = _read_executor(reader.sub("executor"))
    log_format = check_log_format(reader.get("log_format", str, "text"), f"{where}: log_format")
    web = _read_web(reader.sub("web"), base)
    keystore = _read_keystore(reader.sub("keystore"), base)
    broker = _read_broker(reader.sub("broker"), base, broker_url)
    flower = _read_flower(reader.sub("flower"), base)
    images = read_images(reader.sub("images"), base)
    nodes = read_nodes(reader.sub("nodes"), base)
    reader.finish()
    return Settings(
        zookeeper=zookeeper,
        broker_url=broker_url,
        database_url=_resolve_database_url(database_url, base),
        state_dir=state_dir,
        tenant_config=tenant_config,
        connections=connections,
        sweep_interval=sweep_interval,
        visibility_timeout=visibility_timeout,
        executor=executor,
        log_format=log_format,
        web=web,
        keystore=keystore,
        broker=broker,
        flower=flower,
        images=images,
        nodes=nodes,
    )


def find_config(explicit: str | os.PathLike[str] | None = None) -> Path | None:
    """The config file to use: explicit, ``$SLUICE_CONFIG``, ``./sluice.yaml`` or none."""
    if explicit:
        path = Path(explicit)
        if not path.is_file():
            raise SettingsError(f"{path}: config file not found")
        return path.resolve()
    env = os.environ.get(CONFIG_ENV)
    if env:
        path = Path(env)
        if not path.is_file():
            raise SettingsError(f"{path}: config file not found (from ${CONFIG_ENV})")
        return path.resolve()
    local = Path.cwd() / DEFAULT_CONFIG_NAME
    return local.resolve() if local.is_file() else None


def parse_settings(text: str, where: str, base: Path) -> Settings:
    """Parse the text of a ``sluice.yaml``; ``where`` names it in errors."""
    return _from_mapping(load_mapping(text, where), where, base)


def _zookeeper_password_file(settings: Settings, path: Path) -> Settings:
    """``SLUICE_ZK_PASSWORD_FILE``: ``zookeeper.auth`` with its password (user ``sluice``
    unless one is set)."""
    current = settings.zookeeper.auth
    username = current.username if current is not None else ZOOKEEPER_USER
    password = read_password_file(path, "SLUICE_ZK_PASSWORD_FILE")
    auth = ZooKeeperAuth(username, password, path)
    return replace(settings, zookeeper=replace(settings.zookeeper, auth=auth))


def with_zookeeper_auth(settings: Settings) -> Settings:
    """``settings`` whose ``zookeeper.auth`` holds the password of its file, when it has one.

    Without ``zookeeper.auth``, a ZooKeeper all on loopback is reached as
    the local stack's identity (user ``sluice``) once
    ``<state_dir>/zookeeper.password`` exists; a ``password_file`` read
    before it existed is read again. Every process loads its settings
    through this (:func:`scheduler.settings.load_settings`), so every node
    it creates carries that identity's ACL.
    """
    zookeeper = settings.zookeeper
    auth = zookeeper.auth
    if auth is not None and (auth.password or auth.password_file is None):
        return settings
    if auth is None and not exposure.zookeeper_on_loopback(zookeeper):
        return settings
    path = settings.zookeeper_password_file
    password = read_password_file(path, "zookeeper.auth.password_file")
    if not password:
        return settings
    username = auth.username if auth is not None else ZOOKEEPER_USER
    fresh = ZooKeeperAuth(username, password, path)
    return replace(settings, zookeeper=replace(zookeeper, auth=fresh))


def load_settings(
    config: str | os.PathLike[str] | None = None, environ: Mapping[str, str] | None = None
) -> Settings:
    """Load settings from the config file (if any) and the environment."""
    environ = os.environ if environ is None else environ
    path = find_config(config)
    if path is None:
        settings = parse_settings("", "<defaults>", Path.cwd())
    else:
        settings = parse_settings(path.read_text(), str(path), path.parent)
        settings = replace(settings, source=path)
    settings = apply_environment(settings, environ)
    if environ.get("SLUICE_ZK_PASSWORD_FILE"):
        path = Path(environ["SLUICE_ZK_PASSWORD_FILE"]).resolve()
        settings = _zookeeper_password_file(settings, path)
    settings = with_zookeeper_auth(settings)
    return exposure.with_broker_password(settings)
