"""Connecting to ZooKeeper from the settings, one client per process.

A kazoo client must never cross a ``fork()``: a client created in a parent
hangs in the child. :func:`process_client` therefore keys the client by the
process id and builds a fresh one lazily in each process (Celery prefork
children included).
"""

from __future__ import annotations

import os
import threading

from kazoo.client import KazooClient

from scheduler.settings import ZooKeeperSettings


def _hosts_with_chroot(settings: ZooKeeperSettings) -> str:
    root = settings.root.rstrip("/")
    return settings.hosts + root if root else settings.hosts


def _ensure_root(settings: ZooKeeperSettings) -> None:
    """Create the chroot node itself, which a chrooted client cannot do."""
    if settings.root in ("", "/"):
        return
    bare = _make_client(settings, settings.hosts)
    bare.start(timeout=settings.call_timeout)
    try:
        bare.ensure_path(settings.root)
    finally:
        bare.stop()
        bare.close()


def _make_client(settings: ZooKeeperSettings, hosts: str) -> KazooClient:
    auth_data = None
    if settings.auth is not None:
        auth_data = [("digest", f"{settings.auth.username}:{settings.auth.password}")]
    kwargs: dict[str, object] = {}
    if settings.tls is not None:
        kwargs.update(
            use_ssl=True,
            ca=settings.tls.ca,
            certfile=settings.tls.cert,
            keyfile=settings.tls.key,
            verify_certs=settings.tls.verify,
        )
    return KazooClient(
        hosts=hosts,
        timeout=settings.session_timeout,
        auth_data=auth_data,
        **kwargs,
    )


def connect(settings: ZooKeeperSettings) -> KazooClient:
    """A started kazoo client chrooted at ``settings.root``."""
    _ensure_root(settings)
    client = _make_client(settings, _hosts_with_chroot(settings))
    client.start(timeout=settings.call_timeout)
    return client


_lock = threading.Lock()
_clients: dict[tuple[int, ZooKeeperSettings], KazooClient] = {}


def process_client(settings: ZooKeeperSettings) -> KazooClient:
    """This process's client for ``settings``, created after any fork."""
    forget_inherited_clients()
    key = (os.getpid(), settings)
    with _lock:
        client = _clients.get(key)
        if client is None:
            client = connect(settings)
            _clients[key] = client
        return client


def forget_inherited_clients() -> None:
    """Drop clients created by a parent process (call right after a fork)."""
    with _lock:
        for stale in [k for k in _clients if k[0] != os.getpid()]:
            del _clients[stale]


def close_process_clients() -> None:
    with _lock:
        for (pid, _), client in list(_clients.items()):
            if pid == os.getpid():
                client.stop()
                client.close()
        _clients.clear()
