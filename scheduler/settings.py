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
``SLUICE_TENANT_CONFIG``, ``SLUICE_SWEEP_INTERVAL``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from scheduler.errors import SettingsError

CONFIG_ENV = "SLUICE_CONFIG"
DEFAULT_CONFIG_NAME = "sluice.yaml"
DEFAULT_STATE_DIR = ".sluice"


@dataclass(frozen=True)
class ZooKeeperAuth:
    """Digest authentication for the ZooKeeper client."""

    username: str
    password: str


@dataclass(frozen=True)
class ZooKeeperTLS:
    """TLS options for the ZooKeeper client (paths already absolute)."""

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
    tls: ZooKeeperTLS | None = None


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
    # Where the settings came from (None: built-in defaults only).
    source: Path | None = None

    @property
    def log_dir(self) -> Path:
        return self.state_dir / "logs"

    @property
    def run_dir(self) -> Path:
        return self.state_dir / "run"


# --------------------------------------------------------------------------
# Loading


class _LineLoader(yaml.SafeLoader):
    """A safe loader that remembers the line of every mapping key."""


def _construct_mapping(loader: _LineLoader, node: yaml.MappingNode) -> dict[str, Any]:
    loader.flatten_mapping(node)
    mapping: dict[str, Any] = {}
    lines: dict[str, int] = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        mapping[key] = loader.construct_object(value_node, deep=True)
        lines[str(key)] = key_node.start_mark.line + 1
    mapping["__lines__"] = lines
    return mapping


_LineLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG,
    _construct_mapping,
)


class _Reader:
    """Walks one mapping of the file, reporting errors with file and line."""

    def __init__(self, data: dict[str, Any], where: str, prefix: str = "") -> None:
        self.data = dict(data)
        self.lines: dict[str, int] = self.data.pop("__lines__", {})
        self.where = where
        self.prefix = prefix
        self.used: set[str] = set()

    def error(self, key: str, message: str) -> SettingsError:
        line = self.lines.get(key)
        loc = f"{self.where}:{line}" if line else self.where
        return SettingsError(f"{loc}: {self.prefix}{key}: {message}")

    def get(self, key: str, kind: type | tuple[type, ...], default: Any) -> Any:
        self.used.add(key)
        if key not in self.data or self.data[key] is None:
            return default
        value = self.data[key]
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
            names = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
            raise self.error(key, f"expected {_kind_name(names)}, got {type(value).__name__}")
        return value

    def sub(self, key: str) -> _Reader | None:
        value = self.get(key, dict, None)
        if value is None:
            return None
        return _Reader(value, self.where, f"{self.prefix}{key}.")

    def finish(self) -> None:
        unknown = sorted(set(self.data) - self.used)
        if unknown:
            raise self.error(unknown[0], "unknown key")


def _kind_name(name: str) -> str:
    return {"str": "a string", "float": "a number", "dict": "a mapping", "bool": "true/false"}.get(
        name, name
    )


def _resolve_path(value: str, base: Path) -> Path:
    path = Path(value).expanduser()
    # normpath, not resolve(): ``..`` goes, symlinks stay as the operator wrote them
    return Path(os.path.normpath(path if path.is_absolute() else base / path))


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
    return str(_resolve_path(value, base))


def _read_zookeeper(reader: _Reader | None, base: Path) -> ZooKeeperSettings:
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
        auth = ZooKeeperAuth(
            username=auth_reader.get("username", str, ""),
            password=auth_reader.get("password", str, ""),
        )
        auth_reader.finish()
        if not auth.username:
            raise reader.error("auth", "needs a username")
    tls = None
    tls_reader = reader.sub("tls")
    if tls_reader is not None:

        def path(key: str) -> str | None:
            assert tls_reader is not None
            value = tls_reader.get(key, str, None)
            return None if value is None else str(_resolve_path(value, base))

        tls = ZooKeeperTLS(
            ca=path("ca"),
            cert=path("cert"),
            key=path("key"),
            verify=tls_reader.get("verify", bool, True),
        )
        tls_reader.finish()
    reader.finish()
    return ZooKeeperSettings(hosts, root, session_timeout, call_timeout, auth, tls)


def _read_connections(reader: _Reader | None, base: Path) -> dict[str, ConnectionSettings]:
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
            sub.finish()
            options: dict[str, Any] = {}
        else:
            options = {k: v for k, v in sub.data.items() if k not in sub.used}
        connections[name] = ConnectionSettings(name, driver, baseurl, options)
    return connections


def _read_executor(reader: _Reader | None) -> ExecutorSettings:
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
    reader.finish()
    return ExecutorSettings(
        poll_interval=poll_interval,
        kill_grace=kill_grace,
        share_objects=share_objects,
        **counts,
    )


def _from_mapping(data: dict[str, Any], where: str, base: Path) -> Settings:
    reader = _Reader(data, where)
    zookeeper = _read_zookeeper(reader.sub("zookeeper"), base)
    broker_url = reader.get("broker_url", str, "redis://127.0.0.1:6379/0")
    database_url = reader.get("database_url", str, None)
    state_dir = _resolve_path(reader.get("state_dir", str, DEFAULT_STATE_DIR), base)
    if database_url is None:
        database_url = f"sqlite:///{state_dir / 'sluice.db'}"
    tenant_config = _resolve_path(reader.get("tenant_config", str, "main.yaml"), base)
    connections = _read_connections(reader.sub("connections"), base)
    sweep_interval = reader.get("sweep_interval", float, 10.0)
    visibility_timeout = reader.get("visibility_timeout", float, 3600.0)
    executor = _read_executor(reader.sub("executor"))
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
    )


def _float_env(name: str, value: str) -> float:
    try:
        return float(value)
    except ValueError:
        raise SettingsError(f"environment {name}: expected a number, got {value!r}") from None


_ENV_OVERRIDES: dict[str, Callable[[Settings, str], Settings]] = {
    "SLUICE_ZK_HOSTS": lambda s, v: replace(s, zookeeper=replace(s.zookeeper, hosts=v)),
    "SLUICE_ZK_ROOT": lambda s, v: replace(s, zookeeper=replace(s.zookeeper, root=v)),
    "SLUICE_ZK_SESSION_TIMEOUT": lambda s, v: replace(
        s,
        zookeeper=replace(
            s.zookeeper,
            session_timeout=_float_env("SLUICE_ZK_SESSION_TIMEOUT", v),
            call_timeout=_float_env("SLUICE_ZK_SESSION_TIMEOUT", v),
        ),
    ),
    "SLUICE_BROKER_URL": lambda s, v: replace(s, broker_url=v),
    "SLUICE_DATABASE_URL": lambda s, v: replace(s, database_url=v),
    "SLUICE_STATE_DIR": lambda s, v: replace(s, state_dir=Path(v).resolve()),
    "SLUICE_TENANT_CONFIG": lambda s, v: replace(s, tenant_config=Path(v).resolve()),
    "SLUICE_SWEEP_INTERVAL": lambda s, v: replace(
        s, sweep_interval=_float_env("SLUICE_SWEEP_INTERVAL", v)
    ),
}


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
    try:
        data = yaml.load(text, Loader=_LineLoader)  # a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        loc = f"{where}:{mark.line + 1}" if mark is not None else where
        raise SettingsError(f"{loc}: invalid YAML: {getattr(exc, 'problem', exc)}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise SettingsError(f"{where}: expected a mapping at the top level")
    return _from_mapping(data, where, base)


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
    for name, apply in _ENV_OVERRIDES.items():
        value = environ.get(name)
        if value:
            settings = apply(settings, value)
    return settings
