"""Locks: kazoo ``Lock``, ``ReadLock``/``WriteLock`` and one-create side-channel claims.

Guarantees:

* :func:`acquire` takes a kazoo lock recipe (exclusive, read or write) on a
  lock directory and returns a :class:`HeldLock` whose
  :attr:`HeldLock.context` names the holder's own ephemeral node. Writes
  made through that context are fenced by it (:mod:`scheduler.zk.context`).
  ``timeout`` bounds the wait; ``blocking=False`` tries once.
* :func:`claim` is the cheap side-channel lock of the job request queues
  and the seed's ``locks/<uuid>``: one ephemeral create of a fixed path that
  fails if it exists. It costs one round trip (the kazoo ``Lock`` recipe
  costs about seven on a fresh path) and, living apart from the thing it
  guards, it can be held while that thing is deleted.
* Ephemeral nodes vanish when the holder's session expires, so a killed
  holder releases every lock within the session timeout.

On SUSPENDED the holder must stop acting (its context is invalid) but may
resume if the connection comes back within the session; on LOST every lock
of the session is gone for good and the context refuses writes, although
kazoo's ``Lock.is_acquired`` still says True. Release after LOST is a
harmless no-op.
"""

from __future__ import annotations

import enum
import logging
from types import TracebackType

from kazoo.exceptions import (
    ConnectionLoss,
    LockTimeout,
    NodeExistsError,
    NoNodeError,
    SessionExpiredError,
)
from kazoo.recipe.lock import Lock, ReadLock, WriteLock

from scheduler.zk import paths
from scheduler.zk.client import ZooKeeperClient
from scheduler.zk.context import LockContext
from scheduler.zk.errors import ZooKeeperError, ZooKeeperUnavailableError

log = logging.getLogger(__name__)


class LockKind(enum.StrEnum):
    EXCLUSIVE = "exclusive"
    READ = "read"
    WRITE = "write"


_RECIPES = {LockKind.EXCLUSIVE: Lock, LockKind.READ: ReadLock, LockKind.WRITE: WriteLock}


class HeldLock:
    """A lock this process holds; use :attr:`context` for every write it guards."""

    def __init__(
        self, client: ZooKeeperClient, path: str, node: str, recipe: Lock | None = None
    ) -> None:
        self.client = client
        self.path = path
        self.node = node
        self.context = LockContext(client, node)
        self._recipe = recipe

    @property
    def valid(self) -> bool:
        return self.context.valid

    def release(self) -> None:
        """Let go (delete our node); harmless if the session already lost it."""
        self.context.mark_released()
        if self._recipe is not None:
            # kazoo's own release() makes calls without a deadline: do it here.
            self._recipe.is_acquired = False
            self._recipe.node = None
        try:
            self.client.delete(self.node)
        except (NoNodeError, ZooKeeperError) as exc:
            log.info("releasing %s: %s", self.node, exc)

    def __enter__(self) -> HeldLock:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()


def acquire(
    client: ZooKeeperClient,
    path: str,
    *,
    kind: LockKind = LockKind.EXCLUSIVE,
    identifier: str = "",
    timeout: float | None = None,
    blocking: bool = True,
) -> HeldLock | None:
    """Take the lock at ``path``; None if not obtained (non-blocking or timed out)."""
    recipe = _RECIPES[kind](client.kazoo, path, identifier=identifier)
    wait = client.call_timeout if timeout is None else timeout
    try:
        gotten = recipe.acquire(blocking=blocking, timeout=wait if blocking else None)
    except LockTimeout:
        return None
    except (ConnectionLoss, SessionExpiredError) as exc:
        raise ZooKeeperUnavailableError(f"locking {path}: {exc!r}") from exc
    if not gotten:
        return None
    return HeldLock(client, path, paths.join(path, recipe.node), recipe)


def contenders(client: ZooKeeperClient, path: str) -> list[str]:
    """Identifiers of the processes holding or waiting for the lock at ``path``."""
    return list(Lock(client.kazoo, path).contenders())


def claim(client: ZooKeeperClient, path: str, identifier: str = "") -> HeldLock | None:
    """One ephemeral create of ``path``; None if someone holds it already."""
    try:
        node = client.create(path, identifier.encode(), ephemeral=True, makepath=True)
    except NodeExistsError:
        return None
    return HeldLock(client, path, node)


def holder(client: ZooKeeperClient, path: str) -> str | None:
    """The identifier written by the holder of a :func:`claim`, None if unheld."""
    try:
        data, _ = client.get(path)
    except NoNodeError:
        return None
    return data.decode(errors="replace")
