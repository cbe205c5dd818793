"""What the kazoo layer needs to know to connect: where, how long to wait, as whom, over what.

The settings (:class:`scheduler.settings.sections.ZooKeeperSettings`) are
one shape of it; the layer asks only for these read-only fields, so it
imports nothing of the settings. An endpoint is hashable: a process keeps
one client per endpoint (:func:`scheduler.zk.client.process_client`).
"""

from __future__ import annotations

from collections.abc import Hashable
from pathlib import Path
from typing import Protocol


class DigestIdentity(Protocol):
    """A digest identity (``zookeeper.auth``)."""

    @property
    def username(self) -> str: ...

    @property
    def password(self) -> str: ...

    @property
    def password_file(self) -> Path | None:
        """Where the password was read from ("" password: that file is missing)."""


class Tls(Protocol):
    """TLS options of the client (``zookeeper.tls``); paths already absolute."""

    @property
    def ca(self) -> str | None: ...

    @property
    def cert(self) -> str | None: ...

    @property
    def key(self) -> str | None: ...

    @property
    def verify(self) -> bool: ...


class ZooKeeperEndpoint(Hashable, Protocol):
    """The servers, the chroot, the deadlines, the identity and the TLS of a client."""

    @property
    def hosts(self) -> str: ...

    @property
    def root(self) -> str: ...

    @property
    def session_timeout(self) -> float: ...

    @property
    def call_timeout(self) -> float: ...

    @property
    def auth(self) -> DigestIdentity | None: ...

    @property
    def tls(self) -> Tls | None: ...
