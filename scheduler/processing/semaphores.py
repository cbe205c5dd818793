"""Semaphores taken and released inside a pipeline pass's transaction.

The manager asks :meth:`TxnLedger.try_acquire` / :meth:`TxnLedger.release`
while it decides; the ledger reads each semaphore once, keeps the holders in
memory, and :meth:`TxnLedger.add_ops` turns every change into a
compare-and-set in the pass's transaction. So a semaphore slot is taken if
and only if the build that needs it is committed: a pass that fails to
commit (fenced, or another pipeline took the slot first: the version check
fails) leaves no leaked holder, and the next pass decides again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from scheduler.zk import doctree, paths, stored
from scheduler.zk.client import ZooKeeperClient
from scheduler.zk.context import Transaction


@dataclass
class _Slot:
    path: str
    holders: list[str]
    version: int  # -1: the node does not exist yet
    changed: bool = False


@dataclass
class TxnLedger:
    client: ZooKeeperClient
    tenant: str
    # max holders per semaphore name; names absent here are implicit, max 1
    maxima: Mapping[str, int] = field(default_factory=dict)
    global_names: frozenset[str] = frozenset()
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
            holders = [str(h) for h in found.get(path, {}).get("holders", [])]
            slot = _Slot(path, holders, tree.versions.get(path, -1))
            self._slots[name] = slot
        return slot

    def holders(self, name: str) -> list[str]:
        return list(self._slot(name).holders)

    def try_acquire(self, name: str, holder: str) -> bool:
        slot = self._slot(name)
        if holder in slot.holders:
            return True
        if len(slot.holders) >= self.maxima.get(name, 1):
            return False
        slot.holders.append(holder)
        slot.changed = True
        return True

    def release(self, name: str, holder: str) -> None:
        slot = self._slot(name)
        if holder in slot.holders:
            slot.holders.remove(holder)
            slot.changed = True

    def add_ops(self, txn: Transaction) -> None:
        """Compare-and-set every changed semaphore in ``txn``."""
        for slot in self._slots.values():
            if not slot.changed:
                continue
            data = stored.encode({"holders": slot.holders})
            if slot.version < 0:
                self.client.ensure_path(paths.parent(slot.path))
                txn.create(slot.path, data)
            else:
                txn.set(slot.path, data, slot.version)
