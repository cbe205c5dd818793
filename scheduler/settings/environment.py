"""What the environment changes of ``sluice.yaml``: the ``SLUICE_*`` variables.

Each variable of :data:`ENV_OVERRIDES` replaces one setting (or a few that
go together); an empty variable changes nothing. A value that cannot be
read is a :class:`~scheduler.errors.SettingsError` naming the variable.
:func:`scheduler.settings.load.load_settings` applies them after the file.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path

from scheduler.errors import SettingsError
from scheduler.settings.reader import read_password_file
from scheduler.settings.sections import ZOOKEEPER_USER, Settings, ZooKeeperAuth

LOG_FORMATS = ("text", "json")


def check_log_format(value: str, where: str) -> str:
    if value not in LOG_FORMATS:
        raise SettingsError(f"{where}: expected one of {', '.join(LOG_FORMATS)}, got {value!r}")
    return value


_TRUE_WORDS = ("1", "true", "yes", "on")
_FALSE_WORDS = ("0", "false", "no", "off")


def _bool_env(name: str, value: str) -> bool:
    word = value.strip().lower()
    if word not in _TRUE_WORDS + _FALSE_WORDS:
        raise SettingsError(f"environment {name}: expected 1 or 0 (true/false), got {value!r}")
    return word in _TRUE_WORDS


def _float_env(name: str, value: str) -> float:
    try:
        return float(value)
    except ValueError:
        raise SettingsError(f"environment {name}: expected a number, got {value!r}") from None


def _keystore_from_file(settings: Settings, path: Path) -> Settings:
    keystore = replace(settings.keystore, password=read_password_file(path), password_file=path)
    return replace(settings, keystore=keystore)


def _zookeeper_password_file(settings: Settings, path: Path) -> Settings:
    """``SLUICE_ZK_PASSWORD_FILE``: ``zookeeper.auth`` with its password (user ``sluice``
    unless one is set)."""
    current = settings.zookeeper.auth
    username = current.username if current is not None else ZOOKEEPER_USER
    password = read_password_file(path, "SLUICE_ZK_PASSWORD_FILE")
    auth = ZooKeeperAuth(username, password, path)
    return replace(settings, zookeeper=replace(settings.zookeeper, auth=auth))


ENV_OVERRIDES: dict[str, Callable[[Settings, str], Settings]] = {
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
    "SLUICE_LOG_FORMAT": lambda s, v: replace(
        s, log_format=check_log_format(v, "environment SLUICE_LOG_FORMAT")
    ),
    "SLUICE_WEB_LISTEN": lambda s, v: replace(s, web=replace(s.web, listen=v)),
    "SLUICE_SWEEP_INTERVAL": lambda s, v: replace(
        s, sweep_interval=_float_env("SLUICE_SWEEP_INTERVAL", v)
    ),
    "SLUICE_SANDBOX_WRITABLE": lambda s, v: replace(
        s,
        executor=replace(
            s.executor,
            sandbox_writable=tuple(Path(p).resolve() for p in v.split(os.pathsep) if p),
        ),
    ),
    "SLUICE_BUILD_DIR": lambda s, v: replace(
        s, executor=replace(s.executor, build_dir=Path(v).resolve() if v else None)
    ),
    "SLUICE_KEYSTORE_PASSWORD_FILE": lambda s, v: _keystore_from_file(s, Path(v).resolve()),
    "SLUICE_BROKER_PASSWORD_FILE": lambda s, v: replace(
        s, broker=replace(s.broker, password="", password_file=Path(v).resolve())
    ),
    "SLUICE_FAST_SEND": lambda s, v: replace(
        s, broker=replace(s.broker, fast_send=_bool_env("SLUICE_FAST_SEND", v))
    ),
    # the password of zookeeper.auth's user (sluice when the file names none)
    "SLUICE_ZK_PASSWORD_FILE": lambda s, v: _zookeeper_password_file(s, Path(v).resolve()),
}


def apply_environment(settings: Settings, environ: Mapping[str, str]) -> Settings:
    """``settings`` with every ``SLUICE_*`` variable set in ``environ`` applied."""
    for name, apply in ENV_OVERRIDES.items():
        value = environ.get(name)
        if value:
            settings = apply(settings, value)
    return settings
