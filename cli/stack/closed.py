"""The local stack closed by default: what ``stack up`` refuses, and its private state dir.

Before it starts anything, ``sluice stack up`` refuses (:func:`refuse_open`),
each in one line naming the setting:

* a web or a Flower outside loopback without authentication
  (:mod:`scheduler.settings.exposure`);
* a ZooKeeper outside loopback without ``zookeeper.auth``;
* a Redis answering at ``broker_url`` that asks for no password: any local
  process, a CI job included, could read and write the broker.

The state dir is the stack's alone (:func:`private_state_dir`): mode 0700,
like every folder the stack makes in it, and its passwords and logs 0600
(the services it spawns run with umask 077, :mod:`cli.stack.process`). A
state dir found looser is tightened, with the folders and files the stack
keeps there; one that is a shared folder (world-writable, like ``/tmp``) is
refused.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from cli.stack import process
from cli.stack import redis as redis_service
from scheduler.errors import SettingsError
from scheduler.settings import exposure
from scheduler.settings.sections import BROKER_PASSWORD_FILE, ZOOKEEPER_PASSWORD_FILE, Settings

# what the stack and its workers keep in the state dir
PRIVATE_FOLDERS = ("zookeeper", "redis", "logs", "run", "builds", "git", "images", "demo")
# ... walked to the last file when the state dir was found looser than 0700
SMALL_FOLDERS = ("zookeeper", "redis", "logs", "run")
SECRET_FILES = (BROKER_PASSWORD_FILE, ZOOKEEPER_PASSWORD_FILE, "keystore.password")


def refuse_open(settings: Settings, *, flower: bool) -> list[str]:
    """SettingsError for what would run open (module docstring); notes for the operator."""
    exposure.refuse_open_web(settings.web)
    if flower:
        exposure.refuse_open_flower(settings.flower)
    exposure.refuse_open_zookeeper(settings.zookeeper)
    url = settings.broker_url
    ssl_options = exposure.broker_ssl_options(url, settings.broker.tls)
    if redis_service.is_open(url, ssl_options):
        shown = exposure.redact(redis_service.without_credentials(url))
        raise SettingsError(
            f"refusing to reuse the Redis at {shown} (broker_url): it answers without a "
            "password, so any local process could read and write the broker; give it a "
            "password (requirepass, and broker.password_file), or point broker_url at a "
            "free port so the stack starts its own"
        )
    cleartext = exposure.zookeeper_cleartext(settings.zookeeper)
    return [cleartext] if cleartext else []


def private_state_dir(settings: Settings) -> None:
    """The state dir 0700 with its folders, its secrets and logs 0600 (made or tightened)."""
    state_dir = settings.state_dir
    if state_dir.exists():
        mode = state_dir.stat().st_mode
        if mode & stat.S_IWOTH or state_dir.resolve() == Path("/"):
            raise SettingsError(
                f"state_dir {state_dir} is a shared folder (mode {stat.filemode(mode)}); "
                "give the stack a folder of its own, e.g. state_dir: .sluice"
            )
        looser = mode & 0o777 != 0o700
    else:
        looser = False
    process.private_dir(state_dir)
    for name in PRIVATE_FOLDERS:
        folder = state_dir / name
        if folder.is_dir() and not folder.is_symlink():
            process.private_dir(folder)
    for name in SECRET_FILES:
        _tighten(state_dir / name, 0o600)
    for path in state_dir.glob("*.db*"):
        _tighten(path, 0o600)
    if looser:
        for name in SMALL_FOLDERS:
            _tighten_tree(state_dir / name)
    process.private_dir(settings.log_dir)
    process.private_dir(settings.run_dir)


def _tighten(path: Path, mode: int) -> None:
    """``path`` to ``mode`` if it is a file or folder of its own (a symlink is left alone)."""
    try:
        found = path.lstat()
    except FileNotFoundError:
        return
    if stat.S_ISLNK(found.st_mode) or found.st_mode & 0o777 == mode:
        return
    path.chmod(mode)


def _tighten_tree(top: Path) -> None:
    """Folders below ``top`` 0700, files 0600 (symlinks are not followed)."""
    if not top.is_dir() or top.is_symlink():
        return
    for folder, folders, files in os.walk(top):
        base = Path(folder)
        _tighten(base, 0o700)
        for name in files:
            _tighten(base / name, 0o600)
        folders[:] = [name for name in folders if not (base / name).is_symlink()]
