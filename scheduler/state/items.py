"""Decoded queue items kept across passes, valid while their documents are.

Decoding every item of a pipeline on every pass, and encoding every item
again to find what changed, made a pass's cost grow with the depth of the
pipeline. This per-process cache keeps, per pipeline, a :class:`Snapshot`:
for each item a *pristine* :class:`~scheduler.model.item.QueueItem` and the
document objects it was decoded from or encoded to (path -> document).

* **Validated on every use** (docs/architecture.md invariant 1). Documents are never
  mutated once read or written, and a fresh read from ZooKeeper makes new
  document objects. A snapshot was made from one tree, whose root document
  it names: when the tree being decoded has that very root object (``is``),
  it is the same tree (the store's tree cache hands it out only while the
  root's version in ZooKeeper is the one it remembers, and every commit of
  any process bumps it) and every entry holds, with no look at each item.
  Otherwise an entry is used only when every document it came from is the
  very object at its path in the tree being decoded.
* **Copy on write.** Pristine items are never handed out for writing: a
  pass's state holds them in an :class:`~scheduler.model.item_map.ItemMap`,
  which clones an item the first time the pass looks it up. When the pass
  commits, only the items it took are looked at: one equal (``==``) to its
  pristine keeps its documents, any other is encoded (a clone of it becomes
  the new pristine). Untaken items cost nothing.
* **Settled items.** A snapshot also says which items a pass advanced
  without deciding anything (nor changing them), and under which layout
  (the manager's fence): the next pass need not advance them again while
  they, the items ahead of them and the layout are unchanged
  (``PipelineState.settled``, used by the managers' walks).
* **Only what committed.** The store replaces a pipeline's snapshot after a
  commit succeeded; a pass that raises or does not commit leaves it as it
  was (its clones are dropped).
* An item decoded from an incomplete set of documents (a reader without the
  lock racing a commit: a listed job or build missing) is not kept, and
  that read leaves no snapshot of its own.

Thread-safe: snapshots are never changed once made, and a pipeline's is
replaced under a lock.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from scheduler.model.item import QueueItem, Settled

Document = dict[str, Any]


@dataclass(frozen=True)
class CachedItem:
    """A pristine item (never mutated) and the documents it stands for, by path."""

    item: QueueItem
    docs: Mapping[str, Document]

    def current_in(self, docs: Mapping[str, Document]) -> bool:
        """Whether ``docs`` holds exactly (the same objects) the documents of this item."""
        return all(docs.get(path) is doc for path, doc in self.docs.items())


@dataclass(frozen=True)
class Snapshot:
    """A pipeline's pristine items as of one tree (nobody changes a snapshot)."""

    # the root document of the tree every entry is current in (None: check each)
    root_doc: Document | None = None
    entries: Mapping[str, CachedItem] = field(default_factory=dict)
    # the pristine items by uuid (the entries' items, for the state's ItemMap)
    items: Mapping[str, QueueItem] = field(default_factory=dict)
    # items whose step decides nothing, by uuid (scheduler.manager.settling)
    settled: Mapping[str, Settled] = field(default_factory=dict)

    def whole_in(self, docs: Mapping[str, Document], root: str) -> bool:
        """Whether every entry is current in ``docs`` (the very tree it was made from)."""
        return self.root_doc is not None and docs.get(root) is self.root_doc


EMPTY = Snapshot()

_lock = threading.Lock()
_snapshots: dict[tuple[str, str], Snapshot] = {}


def snapshot(tenant: str, pipeline: str) -> Snapshot:
    """The pipeline's snapshot (empty if none is kept)."""
    with _lock:
        return _snapshots.get((tenant, pipeline), EMPTY)


def keep(tenant: str, pipeline: str, kept: Snapshot) -> None:
    """The pipeline's snapshot from now on (after a commit, or a whole read)."""
    with _lock:
        _snapshots[(tenant, pipeline)] = kept


def add(tenant: str, pipeline: str, decoded: Mapping[str, CachedItem]) -> None:
    """Keep items decoded by a torn read, beside the entries already kept (no tree)."""
    if not decoded:
        return
    with _lock:
        old = _snapshots.get((tenant, pipeline), EMPTY)
        entries = {**old.entries, **decoded}
        pristine = {uuid: entry.item for uuid, entry in entries.items()}
        _snapshots[(tenant, pipeline)] = Snapshot(None, entries, pristine)


def forget(tenant: str, pipeline: str) -> None:
    with _lock:
        _snapshots.pop((tenant, pipeline), None)
