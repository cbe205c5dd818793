"""Semaphores, tenant and global: holders recorded in the znode's data.

A semaphore at :func:`scheduler.zk.paths.semaphore` (tenant) or
:func:`scheduler.zk.paths.global_semaphore` (shared by tenants) is one node
whose stored object lists its holders (``{"holders": [...]}``; a holder is
an opaque string such as a build or buildset reference), the pipelines that
wait for a slot (``"waiters": [[tenant, pipeline], ...]``, kept by the pipeline
passes, see :mod:`scheduler.stores.ledger`) and the ``max`` the last
writer knew, so the sweep can tell a waiter that a slot is free.

Guarantees: :meth:`SemaphoreNode.acquire` and :meth:`SemaphoreNode.release` are
compare-and-set updates (read, change, write with the read version, retry
on a lost race), so concurrent schedulers never exceed ``max`` nor lose a
holder. ``max`` comes from the caller (the job configuration), so a changed
limit applies at the next acquire. Acquiring twice for the same holder, or
releasing a holder that does not hold it, is harmless. A holder whose owner
disappeared (its buildset was dequeued by a process that then died) leaks;
:meth:`SemaphoreNode.cleanup` releases every holder for which the caller's
predicate says it no longer exists.

Each update may ride in a fenced transaction (pass the pipeline lock's
context), so a stale scheduler cannot take or free slots. On SUSPENDED or
LOST the update raises and nothing changes; the caller retries after
reconnecting.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from kazoo.exceptions import NoNodeError

from scheduler.zk import stored
from scheduler.zk.client import ZooKeeperClient
from scheduler.zk.context import (
    BAD_VERSION,
    EXISTS,
    NO_NODE,
    LockContext,
    OpFailedError,
    Transaction,
)
from scheduler.zk.errors import ConflictError
from scheduler.zk.retry import CONFLICT


class SemaphoreNode:
    """One semaphore node; every method is a compare-and-set loop."""

    def __init__(self, client: ZooKeeperClient, path: str) -> None:
        self.client = client
        self.path = path

    def _read(self) -> tuple[dict[str, Any], int]:
        """The stored object and node version (-2: the node does not exist yet)."""
        try:
            raw, stat = self.client.get(self.path)
        except NoNodeError:
            return {}, -2
        document = stored.decode(raw, self.path)
        document.pop(stored.SCHEMA_FIELD, None)
        return document, int(stat.version)

    def holders(self) -> list[str]:
        return holders_of(self._read()[0])

    def waiters(self) -> list[tuple[str, str]]:
        """The pipelines (tenant, pipeline) whose jobs wait for a slot."""
        return waiters_of(self._read()[0])

    def has_free_slot(self) -> bool:
        """Fewer holders than the ``max`` the last writer recorded (1 if none)."""
        document = self._read()[0]
        return len(holders_of(document)) < int(document.get("max", 1))

    def _update(
        self, change: Callable[[list[str]], list[str] | None], context: LockContext | None
    ) -> bool:
        """Apply ``change`` (None: nothing to write) with compare-and-set; True if written."""
        for _ in CONFLICT.tries():
            document, version = self._read()
            new = change(holders_of(document))
            if new is None:
                return False
            txn = context.transaction() if context else Transaction(self.client)
            data = stored.encode({**document, "holders": new})
            if version == -2:
                txn.create(self.path, data)
            else:
                txn.set(self.path, data, version)
            try:
                txn.commit()
            except OpFailedError as exc:
                if exc.reason in (BAD_VERSION, EXISTS):
                    continue  # lost a race: read again
                if version == -2 and exc.reason == NO_NODE:
                    self.client.ensure_path(self.path.rsplit("/", 1)[0])
                    continue
                raise
            return True
        tries = CONFLICT.max_tries
        raise ConflictError(f"{self.path}: too much contention, gave up after {tries} tries")

    def acquire(self, holder: str, max_holders: int, context: LockContext | None = None) -> bool:
        """Take a slot for ``holder``; False if ``max_holders`` others hold it."""
        result = {"held": False}

        def change(holders: list[str]) -> list[str] | None:
            # Called again after a lost race: decide afresh every time.
            result["held"] = holder in holders or len(holders) < max_holders
            if holder in holders or not result["held"]:
                return None
            return [*holders, holder]

        self._update(change, context)
        return result["held"]

    def release(self, holder: str, context: LockContext | None = None) -> bool:
        """Free ``holder``'s slot; False if it held none."""

        def change(holders: list[str]) -> list[str] | None:
            return [h for h in holders if h != holder] if holder in holders else None

        return self._update(change, context)

    def cleanup(
        self, exists: Callable[[str], bool], context: LockContext | None = None
    ) -> list[str]:
        """Release every holder for which ``exists(holder)`` is False; returns them."""
        leaked = [h for h in self.holders() if not exists(h)]
        if not leaked:
            return []

        def change(holders: list[str]) -> list[str] | None:
            kept = [h for h in holders if h not in leaked]
            return kept if len(kept) != len(holders) else None

        self._update(change, context)
        return leaked


def holders_of(document: Mapping[str, Any]) -> list[str]:
    return [str(h) for h in document.get("holders", [])]


def waiters_of(document: Mapping[str, Any]) -> list[tuple[str, str]]:
    found = []
    for waiter in document.get("waiters", []):
        if isinstance(waiter, list | tuple) and len(waiter) == 2:
            found.append((str(waiter[0]), str(waiter[1])))
    return found
