"""Decoded queue items kept across passes, valid while their documents are.

Decoding every item of a pipeline on every pass, and encoding every item
again to find what changed, made a pass's cost grow with the depth of the
pipeline. This per-process cache keeps, per pipeline and item, a *pristine*
:class:`~scheduler.model.item.QueueItem` and the document objects it was
decoded from or encoded to (path -> document).

* **Validated on every use** (DESIGN.md invariant 1). Documents are never
  mutated once read or written, and a fresh read from ZooKeeper makes new
  document objects. An entry is used only when every document it came from
  is the *very object* (``is``) at its path in the tree being decoded,
  which the store's tree cache hands out only while the root's version in
  ZooKeeper is the one it remembers (every commit of any process bumps it).
  Another process's write therefore means new objects, and a decode.
* **Copy on write.** The pristine item is never handed out: a pass gets a
  :meth:`~scheduler.model.item.QueueItem.clone` it may mutate. When the pass
  commits, an item equal (``==``) to its pristine was not touched and keeps
  its documents (no encoding, no comparison of documents); any other item is
  cloned once more and encoded (the clone becomes the new pristine).
* **Only what committed.** The store replaces a pipeline's entries after a
  commit succeeded; a pass that raises or does not commit leaves them as
  they were (its clones are dropped).
* An item decoded from an incomplete set of documents (a reader without the
  lock racing a commit: a listed job or build missing) is not kept.

Thread-safe: entries are immutable and a pipeline's mapping is replaced,
never changed in place, under a lock.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from scheduler.model.item import QueueItem

Document = dict[str, Any]


@dataclass(frozen=True)
class CachedItem:
    """A pristine item (never mutated) and the documents it stands for, by path."""

    item: QueueItem
    docs: Mapping[str, Document]

    def current_in(self, docs: Mapping[str, Document]) -> bool:
        """Whether ``docs`` holds exactly (the same objects) the documents of this item."""
        return all(docs.get(path) is doc for path, doc in self.docs.items())


_lock = threading.Lock()
_entries: dict[tuple[str, str], dict[str, CachedItem]] = {}


def entries(tenant: str, pipeline: str) -> Mapping[str, CachedItem]:
    """The pipeline's entries by item uuid (a mapping nobody changes)."""
    with _lock:
        return _entries.get((tenant, pipeline), {})


def add(tenant: str, pipeline: str, decoded: Mapping[str, CachedItem]) -> None:
    """Keep items decoded by a read, beside the entries already kept."""
    if not decoded:
        return
    with _lock:
        merged = dict(_entries.get((tenant, pipeline), {}))
        merged.update(decoded)
        _entries[(tenant, pipeline)] = merged


def replace(tenant: str, pipeline: str, committed: dict[str, CachedItem]) -> None:
    """After a commit: exactly the items of the committed state."""
    with _lock:
        _entries[(tenant, pipeline)] = committed


def forget(tenant: str, pipeline: str) -> None:
    with _lock:
        _entries.pop((tenant, pipeline), None)
