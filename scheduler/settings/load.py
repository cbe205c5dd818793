"""Loading the settings: ``sluice.yaml``, its defaults and environment overrides.

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
(``0`` or ``1``: ``broker.fast_send``); :mod:`scheduler.settings.environment`
applies them. The credentials are completed last
(:mod:`scheduler.settings.exposure`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from scheduler.errors import SettingsError
from scheduler.settings import exposure
from scheduler.settings.environment import apply_environment, check_log_format
from scheduler.settings.images import read_images
from scheduler.settings.nodes import read_nodes
from scheduler.settings.reader import (
    SettingsReader,
    load_mapping,
    read_password_file,
    resolve_path,
)
from scheduler.settings.sections import (
    SANDBOX_NETWORKS,
    Authenticator,
    BrokerSettings,
    ConnectionSettings,
    ExecutorSettings,
    FlowerSettings,
    KeystoreSettings,
    SandboxLimits,
    Settings,
    TLSSettings,
    WebSettings,
    ZooKeeperAuth,
    ZooKeeperSettings,
)

CONFIG_ENV = "SLUICE_CONFIG"
DEFAULT_CONFIG_NAME = "sluice.yaml"
DEFAULT_STATE_DIR = ".sluice"


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
    settings = exposure.with_zookeeper_auth(settings)
    return exposure.with_broker_password(settings)
