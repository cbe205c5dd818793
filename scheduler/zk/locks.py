"""Locks: exclusive, read and write locks with deadlines, and one-create claims.

Guarantees:

* :func:`acquire` takes an exclusive, read or write lock on a lock
  directory and returns a :class:`HeldLock` whose :attr:`HeldLock.context`
  names the holder's own ephemeral node. Writes made through that context
  are fenced by it (:mod:`scheduler.zk.context`). The algorithm and node
  names are kazoo's ``Lock``/``ReadLock``/``WriteLock`` (sequential
  ephemeral contenders ``<uuid>__lock__<seq>`` / ``<uuid>__rlock__<seq>``,
  each watching its blocking predecessor), so kazoo tools see the same
  contenders; but every call here has a deadline. kazoo's own recipe makes
  calls without one and, measured here, blocks forever in its clean-up
  when the server hangs. ``timeout`` bounds the whole acquire;
  ``blocking=False`` tries once.
* A contender node whose create or delete got no answer could block
  everyone while our session lives; it is handed to the client's watchdog
  (:meth:`~scheduler.zk.client.ZooKeeperClient.discard_later`), which
  deletes it as soon as ZooKeeper answers again.
* :func:`try_exclusive` is the lock of callers that never wait (a
  pipeline's, a tenant's event hop): one ephemeral create of
  ``<path>/holder``, no listing.
* :func:`claim` is the cheap side-channel lock of the job request queues
  and the seed's ``locks/<uuid>``: one ephemeral create of a fixed path that
  fails if it exists. It costs one round trip and, living apart from the
  thing it guards, it can be held while that thing is deleted.
* Ephemeral nodes vanish when the holder's session expires, so a killed
  holder releases every lock within the session timeout.

On SUSPENDED the holder must stop acting (its context is invalid) but may
resume if the connection comes back within the session; on LOST every lock
of the session is gone for good and the context refuses writes. A waiter
whose session is lost while waiting gets
:class:`~scheduler.zk.errors.ZooKeeperUnavailableError`. Release after LOST
is a harmless no-op.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import re
import threading
import time
import uuid
from collections.abc import Callable
from types import TracebackType

from kazoo.exceptions import NodeExistsError, NoNodeError

from scheduler.zk import paths
from scheduler.zk.client import ZooKeeperClient
from scheduler.zk.context import LockContext
from scheduler.zk.errors import ZooKeeperError, ZooKeeperUnavailableError

log = logging.getLogger(__name__)

_SEQUENCE = re.compile(r"(__lock__|__rlock__)(-?\d{10})$")


class LockKind(enum.StrEnum):
    EXCLUSIVE = "exclusive"
    READ = "read"
    WRITE = "write"


# Node name of each kind, and the kinds of predecessors that block it (as kazoo).
_NODE_NAME = {
    LockKind.EXCLUSIVE: "__lock__",
    LockKind.READ: "__rlock__",
    LockKind.WRITE: "__lock__",
}
_BLOCKED_BY = {
    LockKind.EXCLUSIVE: ("__lock__",),
    LockKind.READ: ("__lock__",),
    LockKind.WRITE: ("__lock__", "__rlock__"),
}


class HeldLock:
    """A lock this process holds; use :attr:`context` for every write it guards."""

    def __init__(
        self, client: ZooKeeperClient, path: str, node: str, token: bytes | None = None
    ) -> None:
        self.client = client
        self.path = path
        self.node = node
        # a try-lock's node is at a fixed path: its data (unique to the attempt)
        # tells our node from a later holder's when a delete must be retried
        self.token = token
        self.context = LockContext(client, node)

    @property
    def valid(self) -> bool:
        return self.context.valid

    def release(self) -> None:
        """Let go (delete our node); harmless if the session already lost it."""
        if self.context.lost_reason() == "the lock was released":
            return
        self.context.mark_released()
        try:
            self.client.delete(self.node)
        except NoNodeError:
            pass
        except ZooKeeperError as exc:
            log.warning("releasing %s: %s; the watchdog will retry", self.node, exc)
            if self.token is not None:
                self.client.discard_later_if(self.node, self.token)
            else:
                self.client.discard_later(self.path, paths.basename(self.node))

    def __enter__(self) -> HeldLock:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()


def _blocker(children: list[str], mine: str, kind: LockKind) -> str | None:
    """The nearest predecessor of ``mine`` that blocks a lock of ``kind``, or None."""
    ours = _SEQUENCE.search(mine)
    assert ours is not None
    position = int(ours.group(2))
    blocking = None
    best = -1
    for child in children:
        match = _SEQUENCE.search(child)
        if match is None or match.group(1) not in _BLOCKED_BY[kind]:
            continue
        sequence = int(match.group(2))
        if best < sequence < position:
            best, blocking = sequence, child
    return blocking


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
    deadline = time.monotonic() + (client.call_timeout if timeout is None else timeout)
    prefix = uuid.uuid4().hex + _NODE_NAME[kind]
    generation = client.session_generation
    try:
        node = client.create(
            paths.join(path, prefix),
            identifier.encode(),
            ephemeral=True,
            sequence=True,
            makepath=True,
        )
    except ZooKeeperUnavailableError:
        client.discard_later(path, prefix)  # it may exist: the answer was lost
        raise
    try:
        if _wait_turn(
            client,
            path,
            node,
            kind=kind,
            deadline=deadline,
            blocking=blocking,
            generation=generation,
        ):
            return HeldLock(client, path, node)
    except ZooKeeperUnavailableError:
        client.discard_later(path, prefix)
        raise
    try:
        client.delete(node)
    except NoNodeError:
        pass
    except ZooKeeperUnavailableError:
        client.discard_later(path, prefix)
    return None


def _setter(event: threading.Event) -> Callable[[object], None]:
    """A watch callback that sets ``event``."""
    return lambda _watched: event.set()


def _wait_turn(
    client: ZooKeeperClient,
    path: str,
    node: str,
    *,
    kind: LockKind,
    deadline: float,
    blocking: bool,
    generation: int,
) -> bool:
    """Wait until no predecessor blocks ``node``; False when not blocking or out of time."""
    mine = paths.basename(node)
    while True:
        if client.session_generation != generation:
            raise ZooKeeperUnavailableError(f"session lost while waiting for {path}")
        blocker = _blocker(client.get_children(path), mine, kind)
        if blocker is None:
            return True
        left = deadline - time.monotonic()
        if not blocking or left <= 0:
            return False
        gone = threading.Event()
        try:
            # A data watch, not an exists watch: ZooKeeper sets none on a node
            # that is gone already (a contender's node is never made again, so
            # an exists watch on it would stay for the rest of the session).
            client.get(paths.join(path, blocker), watch=_setter(gone))
        except NoNodeError:
            continue
        # Wake up now and then to notice a lost session even without a watch event.
        gone.wait(min(left, max(0.2, client.session_timeout / 3)))


# The node of a try-lock (:func:`try_exclusive`), at a fixed path under the lock's.
HOLDER = "holder"


def try_exclusive(client: ZooKeeperClient, path: str, identifier: str = "") -> HeldLock | None:
    """Take the exclusive lock at ``path`` if nobody holds it, in one request; never waits.

    For locks that callers only ever try (a pipeline's, a tenant's event
    hop): one ephemeral node at the fixed path ``<path>/holder``, so taking
    it needs no listing of contenders (kazoo's recipe needs one). Never mix
    it with :func:`acquire` on the same path.

    The node's data is a token unique to the attempt, followed by
    ``identifier``: a create or delete whose answer was lost is undone by
    the watchdog only while the node still holds that token, never a later
    holder's. As with :func:`claim`, the fence (a ``check`` of the node)
    proves that *a* holder exists, not that it is us: what it guards must
    also be written compare-and-set (a pipeline's document at its version,
    events deleted by a transaction that fails if another took them).
    """
    node = paths.join(path, HOLDER)
    token = f"{uuid.uuid4().hex} {identifier}".encode()
    try:
        client.create(node, token, ephemeral=True, makepath=True)
    except NodeExistsError:
        return None
    except ZooKeeperUnavailableError:
        client.discard_later_if(node, token)  # it may exist: the answer was lost
        raise
    return HeldLock(client, path, node, token)


def has_writer(client: ZooKeeperClient, path: str) -> bool:
    """Whether a write (or exclusive) lock at ``path`` is held or waited for."""
    try:
        children = client.get_children(path)
    except NoNodeError:
        return False
    return any(_NODE_NAME[LockKind.WRITE] in child for child in children)


def contenders(client: ZooKeeperClient, path: str) -> list[str]:
    """Identifiers of the processes holding or waiting for the lock at ``path``, in order."""
    try:
        children = client.get_children(path)
    except NoNodeError:
        return []
    if HOLDER in children:  # a try-lock: one holder, nobody waits
        with contextlib.suppress(NoNodeError):
            data = client.get(paths.join(path, HOLDER))[0]
            return [data.decode(errors="replace").partition(" ")[2]]
        return []
    ordered = sorted(
        (int(m.group(2)), c) for c in children if (m := _SEQUENCE.search(c)) is not None
    )
    pending = [client.kazoo.get_async(paths.join(path, c)) for _, c in ordered]
    found = []
    for result in pending:
        try:
            found.append(client.wait(result)[0].decode(errors="replace"))
        except NoNodeError:
            continue
    return found


def claim(client: ZooKeeperClient, path: str, identifier: str = "") -> HeldLock | None:
    """One ephemeral create of ``path``; None if someone holds it already.

    The fence of a claim is weaker than a lock's: ZooKeeper's ``check``
    proves that *a* node exists at the fixed path, not that it is ours, so
    after our session expired a new claimer's node would pass it. Write
    what a claim guards with a compare-and-set of its version as well (the
    job request queue does: every update carries the request's version).
    """
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
