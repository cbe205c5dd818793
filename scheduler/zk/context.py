"""Write contexts: the lock a writer holds, and fenced transactions.

Guarantees:

* A :class:`LockContext` names the ephemeral lock node its holder created
  and the session that created it. :attr:`LockContext.valid` is false as
  soon as that session was LOST or replaced (kazoo's ``Lock.is_acquired``
  stays True then), while the connection is SUSPENDED, and while the
  watchdog says ZooKeeper has not answered for two thirds of the session
  timeout. :meth:`LockContext.transaction` and :meth:`Transaction.commit`
  refuse to start a write then (:class:`~scheduler.zk.errors.LockLostError`).
* Every :class:`Transaction` made from a context with a lock node carries a
  ``check`` of that node. That is the fence (docs/architecture.md invariant 3): if the
  server expired the holder's session, the ephemeral node is gone and
  ZooKeeper itself rejects the write
  (:class:`~scheduler.zk.errors.FencedWriteError`), whatever the holder
  believed. The local check only saves a round trip; the server-side check
  is what makes a stale holder harmless.
* A transaction is atomic and shares ZooKeeper's ~1 MB request limit; a
  transaction estimated larger is refused before it is sent (a request over
  the limit makes the server drop the connection). Sharded data is written
  first, outside the transaction (:mod:`scheduler.zk.sharding`).

On SUSPENDED a commit waits for nothing: the call either gets its answer
within the call deadline or raises :class:`~scheduler.zk.errors.CallTimeoutError`
/ :class:`~scheduler.zk.errors.ZooKeeperUnavailableError`; whether such a
transaction was applied is unknown, so every multi-step recipe here is
written to be safely repeated.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kazoo.exceptions import (
    BadVersionError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    RolledBackError,
)

from scheduler.zk.client import ConnectionState, ZooKeeperClient
from scheduler.zk.errors import (
    DataTooLargeError,
    FencedWriteError,
    LockLostError,
    TransactionFailedError,
)

# Stay clearly under jute.maxbuffer (1 MiB) including paths and headers.
MAX_TRANSACTION_BYTES = 1_000_000
_OP_OVERHEAD = 64

# Failure reasons reported by TransactionFailedError.reason
EXISTS = "exists"
NO_NODE = "no-node"
BAD_VERSION = "bad-version"
NOT_EMPTY = "not-empty"


def _reason(exc: Exception) -> str:
    if isinstance(exc, NodeExistsError):
        return EXISTS
    if isinstance(exc, NoNodeError):
        return NO_NODE
    if isinstance(exc, BadVersionError):
        return BAD_VERSION
    if isinstance(exc, NotEmptyError):
        return NOT_EMPTY
    return type(exc).__name__


class OpFailedError(TransactionFailedError):
    """A transaction failed on one operation; ``reason`` says why, ``path`` where."""

    def __init__(self, index: int, path: str, cause: Exception) -> None:
        self.reason = _reason(cause)
        self.path = path
        super().__init__(
            f"transaction failed at operation {index} on {path}: {self.reason}", index, cause
        )


@dataclass
class Transaction:
    """Atomic writes; fenced by the holder's lock node when ``fence`` is set."""

    client: ZooKeeperClient
    fence: str | None = None
    context: LockContext | None = None
    _ops: list[tuple[str, str, tuple[Any, ...]]] = field(default_factory=list)
    _size: int = 0

    def __post_init__(self) -> None:
        if self.fence is not None:
            self.check(self.fence)

    def __len__(self) -> int:
        return len(self._ops)

    @property
    def size(self) -> int:
        return self._size

    def _add(self, kind: str, path: str, args: tuple[Any, ...], data: bytes = b"") -> int:
        self._ops.append((kind, path, args))
        self._size += len(path.encode()) + len(data) + _OP_OVERHEAD
        return len(self._ops) - 1

    def create(
        self, path: str, value: bytes = b"", *, ephemeral: bool = False, sequence: bool = False
    ) -> int:
        """Add a create; returns the index of its result (the created path)."""
        return self._add("create", path, (value, ephemeral, sequence), value)

    def set(self, path: str, value: bytes, version: int = -1) -> int:
        return self._add("set", path, (value, version), value)

    def delete(self, path: str, version: int = -1) -> int:
        return self._add("delete", path, (version,))

    def check(self, path: str, version: int = -1) -> int:
        """Fail the transaction unless ``path`` exists (at ``version`` unless -1)."""
        return self._add("check", path, (version,))

    def creates(self, path: str) -> bool:
        """Whether the transaction already holds a create of ``path``."""
        return any(kind == "create" and op_path == path for kind, op_path, _ in self._ops)

    def extend(self, other: Transaction) -> None:
        """Append the operations of another (unfenced) transaction."""
        for kind, path, args in other._ops:
            data = args[0] if kind in ("create", "set") else b""
            self._add(kind, path, args, data)

    def commit(self) -> list[Any]:
        """Send the operations as one ZooKeeper multi; returns each result.

        Raises :class:`FencedWriteError` when the fence check failed,
        :class:`OpFailedError` for any other failed operation, and
        :class:`LockLostError` without sending anything when the context is
        no longer valid.
        """
        if not self._ops:
            return []
        if self.context is not None:
            self.context.ensure_valid()
        if self._size > MAX_TRANSACTION_BYTES:
            raise DataTooLargeError(
                f"transaction of {self._size} bytes exceeds {MAX_TRANSACTION_BYTES}; "
                "write large data as shards first"
            )
        txn = self.client.kazoo.transaction()
        for kind, path, args in self._ops:
            if kind == "create":
                value, ephemeral, sequence = args
                txn.create(path, value, ephemeral=ephemeral, sequence=sequence)
            elif kind == "set":
                txn.set_data(path, args[0], args[1])
            elif kind == "delete":
                txn.delete(path, args[0])
            else:
                txn.check(path, args[0])
        results: list[Any] = self.client.wait(txn.commit_async())
        for index, result in enumerate(results):
            if isinstance(result, Exception) and not isinstance(result, RolledBackError):
                path = self._ops[index][1]
                if self.fence is not None and index == 0:
                    raise FencedWriteError(
                        f"fenced write refused: lock node {path} is gone ({_reason(result)})"
                    )
                raise OpFailedError(index, path, result)
        if any(isinstance(r, Exception) for r in results):
            raise TransactionFailedError("transaction rolled back", -1, results[0])
        return results


class LockContext:
    """The client plus the lock a writer holds; refuses writes once the lock is invalid.

    ``lock_node`` is the full path of the holder's own ephemeral node
    (``None``: an unlocked context that only requires a live connection).
    """

    def __init__(self, client: ZooKeeperClient, lock_node: str | None = None) -> None:
        self.client = client
        self.lock_node = lock_node
        self.session_id = client.session_id
        self.generation = client.session_generation
        self._released = False

    def lost_reason(self) -> str | None:
        """Why this context may no longer act, or None while it may."""
        client = self.client
        if self._released:
            return "the lock was released"
        if client.session_generation != self.generation:
            return "the ZooKeeper session that held the lock was lost"
        if client.state != ConnectionState.CONNECTED:
            return f"the ZooKeeper connection is {client.state.value}"
        if self.lock_node is not None and client.session_id != self.session_id:
            return "the ZooKeeper session that held the lock was replaced"
        if not client.responsive():
            return f"ZooKeeper has not answered for {client.silent_for():.1f}s (watchdog)"
        return None

    @property
    def valid(self) -> bool:
        return self.lost_reason() is None

    def ensure_valid(self) -> None:
        reason = self.lost_reason()
        if reason is not None:
            where = f" on {self.lock_node}" if self.lock_node else ""
            raise LockLostError(f"refusing to write{where}: {reason}")

    def mark_released(self) -> None:
        self._released = True

    def transaction(self) -> Transaction:
        """A new transaction, fenced by this context's lock node."""
        self.ensure_valid()
        return Transaction(self.client, fence=self.lock_node, context=self)
