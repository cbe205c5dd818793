"""Semaphores taken and released inside a pipeline pass's transaction.

The manager asks :meth:`TxnLedger.try_acquire` / :meth:`TxnLedger.release`
while it decides; the ledger reads each semaphore once, keeps the holders in
memory, and :meth:`TxnLedger.add_ops` turns every change into a
compare-and-set in the pass's transaction. So a semaphore slot is taken if
and only if the build that needs it is committed: a pass that fails to
commit (fenced, or another pipeline took the slot first: the version check
fails) leaves no leaked holder, and the next pass decides again.

Waking waiters in other pipelines: a semaphore's document also lists the
pipelines whose jobs wait for it (``waiters``). A pass whose job could not
take a slot adds its pipeline, a pass whose jobs no longer wait removes it,
in the same compare-and-set. A pass that released a slot nudges every other
waiting pipeline after its commit (:meth:`TxnLedger.to_wake`); the sweep
re-nudges waiters of a semaphore with a free slot, in case that nudge was
lost (docs/architecture.md invariant 2).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from scheduler.stores.semaphores import holders_of, waiters_of
from scheduler.zk import doctree, paths, stored
from scheduler.zk.client import ZooKeeperClient
from scheduler.zk.context import Transaction


@dataclass
class _Slot:
    path: str
    holders: list[str]
    version: int  # -1: the node does not exist yet
    waiters: list[tuple[str, str]] = field(default_factory=list)
    changed: bool = False
    # this pass: a job could not take a slot / a slot was given back
    refused: bool = False
    released: bool = False


@dataclass
class TxnLedger:
    client: ZooKeeperClient
    tenant: str
    # max holders per semaphore name; names absent here are implicit, max 1
    maxima: Mapping[str, int] = field(default_factory=dict)
    global_names: frozenset[str] = frozenset()
    # the pipeline whose pass this is (recorded as a waiter)
    pipeline: str = ""
    # (path, version) of the tenant layout state the pass decided with: the
    # commit checks it, so a pass never commits decisions made with a layout
    # that a reconfiguration replaced meanwhile (seed 003's tenant read lock)
    layout_fence: tuple[str, int] | None = None
    _slots: dict[str, _Slot] = field(default_factory=dict)

    def _path(self, name: str) -> str:
        if name in self.global_names:
            return paths.global_semaphore(name)
        return paths.semaphore(self.tenant, name)

    def _slot(self, name: str) -> _Slot:
        slot = self._slots.get(name)
        if slot is None:
            path = self._path(name)
            tree = doctree.DocTree(paths.parent(path))
            found = doctree.get_many(self.client, tree, [path])
            document = found.get(path, {})
            slot = _Slot(
                path, holders_of(document), tree.versions.get(path, -1), waiters_of(document)
            )
            self._slots[name] = slot
        return slot

    def holders(self, name: str) -> list[str]:
        return list(self._slot(name).holders)

    def try_acquire(self, name: str, holder: str) -> bool:
        slot = self._slot(name)
        if holder in slot.holders:
            return True
        if len(slot.holders) >= self.maxima.get(name, 1):
            slot.refused = True
            return False
        slot.holders.append(holder)
        slot.changed = True
        return True

    def release(self, name: str, holder: str) -> None:
        slot = self._slot(name)
        if holder in slot.holders:
            slot.holders.remove(holder)
            slot.changed = True
            slot.released = True

    def _me(self) -> tuple[str, str]:
        return (self.tenant, self.pipeline)

    def _update_waiters(self, slot: _Slot) -> None:
        """This pipeline waits for the slot if and only if a job of this pass was refused."""
        me = self._me()
        if slot.refused and me not in slot.waiters:
            slot.waiters.append(me)
            slot.changed = True
        elif not slot.refused and me in slot.waiters:
            slot.waiters.remove(me)
            slot.changed = True

    def guards(self, path: str) -> bool:
        """True if ``path`` is one this ledger's compare-and-set checks.

        A transaction that failed on such a path lost a race (another pass
        took or freed a slot, or a reconfiguration replaced the layout):
        nothing was committed, and the pass decides again.
        """
        if self.layout_fence is not None and path == self.layout_fence[0]:
            return True
        return any(slot.path == path for slot in self._slots.values())

    def to_wake(self) -> list[tuple[str, str]]:
        """Other pipelines waiting for a semaphore this pass released (after the commit)."""
        found: dict[tuple[str, str], None] = {}
        for slot in self._slots.values():
            if slot.released:
                found.update((w, None) for w in slot.waiters if w != self._me())
        return list(found)

    def add_ops(self, txn: Transaction) -> None:
        """Compare-and-set every changed semaphore in ``txn``, and check the layout fence."""
        if self.layout_fence is not None:
            txn.check(*self.layout_fence)
        for name, slot in self._slots.items():
            self._update_waiters(slot)
            if not slot.changed:
                continue
            document = {
                "holders": slot.holders,
                "waiters": [list(w) for w in slot.waiters],
                "max": self.maxima.get(name, 1),
            }
            data = stored.encode(document)
            if slot.version < 0:
                self.client.ensure_path(paths.parent(slot.path))
                txn.create(slot.path, data)
            else:
                txn.set(slot.path, data, slot.version)
