"""The local stack's Flower: on ``flower.listen``, always behind a login.

The login is that of ``flower.basic_auth_file`` (``user:password`` lines),
or one made at start that ``sluice stack up`` prints once. Outside loopback
a configured login is required (:func:`scheduler.settings.exposure.refuse_open_flower`):
Flower is then refused before anything starts.

Flower reads the login from ``FLOWER_BASIC_AUTH`` in its environment, never
from its command line, where ``ps`` shows it to every user of the host; the
caller's other ``FLOWER_*`` variables are dropped, so none of them can open
it (``FLOWER_UNAUTHENTICATED_API``, ``FLOWER_AUTH``).
"""

from __future__ import annotations

import secrets
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from cli.stack import process
from scheduler.errors import SettingsError, StackError
from scheduler.settings.exposure import refuse_open_flower
from scheduler.settings.sections import FlowerSettings

# the user of a login the stack makes
GENERATED_USER = "sluice"


@dataclass(frozen=True)
class StartedFlower:
    pid: int
    address: str  # http://host:port
    # user:password made now, to print once (None: the configured login)
    generated_login: str | None


def basic_auth(flower: FlowerSettings) -> str:
    """Flower's ``--basic-auth`` (``user:pw,user2:pw2``) from ``flower.basic_auth_file``.

    "" without a file; SettingsError naming the file and line for a bad one.
    """
    if flower.basic_auth_file is None:
        return ""
    where = f"flower.basic_auth_file: {flower.basic_auth_file}"
    try:
        lines = flower.basic_auth_file.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise SettingsError(f"{where}: unreadable: {exc}") from None
    logins = []
    for number, line in enumerate(lines, 1):
        login = line.strip()
        if not login or login.startswith("#"):
            continue
        user, _, password = login.partition(":")
        if not user or not password or "," in login:
            raise SettingsError(f"{where}:{number}: expected user:password (no comma)")
        logins.append(login)
    if not logins:
        raise SettingsError(f"{where}: no user:password line")
    return ",".join(logins)


def _probe_host(host: str) -> str:
    """Where to knock to see whether a listener on ``host`` is up."""
    host = host.strip("[]")
    return {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)


def start(
    flower: FlowerSettings, env: Mapping[str, str], log: Path, cwd: Path, timeout: float = 60
) -> StartedFlower:
    """Start ``celery -A tasks flower`` behind its login and wait for its port."""
    refuse_open_flower(flower)
    configured = basic_auth(flower)
    login = configured or f"{GENERATED_USER}:{secrets.token_urlsafe(12)}"
    host = flower.host.strip("[]")
    port = flower.port or process.free_port()
    if process.port_open(_probe_host(host), port):
        raise StackError(f"Flower: port {flower.host}:{port} is taken; set flower.listen")
    child_env = {k: v for k, v in env.items() if not k.startswith("FLOWER_")}
    child_env["FLOWER_BASIC_AUTH"] = login
    argv = [sys.executable, "-m", "celery", "-A", "tasks", "flower"]
    argv += [f"--port={port}", f"--address={host}"]
    proc = process.spawn(argv, log, env=child_env, cwd=cwd)
    process.wait_for(
        lambda: process.port_open(_probe_host(host), port),
        timeout,
        "Flower",
        log_file=log,
        alive=lambda: process.is_alive(proc.pid),
    )
    address = f"http://{flower.host}:{port}"
    return StartedFlower(proc.pid, address, None if configured else login)
