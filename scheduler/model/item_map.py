"""A pipeline's items by uuid, copied on first write: a pass pays for the items it touches.

A pass reads a pipeline's state, applies a few events and advances the
items. Most items are exactly as the last pass left them, and cloning every
one of them (so the pass may mutate it) made a pass's cost grow with the
depth of the pipeline. :class:`ItemMap` holds the *pristine* items a state
was decoded with (:mod:`scheduler.state.items` keeps them per process, and
nobody may mutate them) and hands out a clone the first time an item is
looked up through the mapping interface (``state.items[uuid]``, ``get``,
``values()``...). The clone is *owned* by the pass from then on: every
later lookup returns it, and only owned items can differ from what is
stored.

Every mapping method is a safe default: code that looks items up gets
items it may mutate. Code that only reads, over many items, uses
:meth:`ItemMap.peek` and :meth:`ItemMap.peek_values`, which return the
owned clone where there is one and the pristine item otherwise; what they
return must never be mutated (take ``items[uuid]`` for that).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, MutableMapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from scheduler.model.item import QueueItem


class ItemMap(MutableMapping[str, "QueueItem"]):
    """Items by uuid: pristine ones shared read-only, cloned on first lookup."""

    __slots__ = ("_owned", "_pristine", "_removed", "origin")

    def __init__(
        self,
        items: Mapping[str, QueueItem] | None = None,
        *,
        pristine: Mapping[str, QueueItem] | None = None,
        origin: object = None,
    ) -> None:
        # never mutated (by this class or anyone): shared with the process's cache
        self._pristine: Mapping[str, QueueItem] = pristine if pristine is not None else {}
        self._owned: dict[str, QueueItem] = dict(items) if items else {}
        # pristine uuids that left the map
        self._removed: set[str] = set()
        # what the pristine items came from (the store's snapshot: it writes the owned ones)
        self.origin = origin

    # -- the mapping (every lookup hands out an item the caller may mutate) ----

    def __getitem__(self, uuid: str) -> QueueItem:
        owned = self._owned.get(uuid)
        if owned is not None:
            return owned
        if uuid in self._removed:
            raise KeyError(uuid)
        clone = self._pristine[uuid].clone()
        self._owned[uuid] = clone
        return clone

    def __setitem__(self, uuid: str, item: QueueItem) -> None:
        self._owned[uuid] = item
        self._removed.discard(uuid)

    def __delitem__(self, uuid: str) -> None:
        if uuid not in self:
            raise KeyError(uuid)
        self._owned.pop(uuid, None)
        if uuid in self._pristine:
            self._removed.add(uuid)

    def discard(self, uuid: str) -> None:
        """Remove ``uuid`` if it is here (without cloning a pristine item to drop it)."""
        if uuid in self:
            del self[uuid]

    def __contains__(self, uuid: object) -> bool:
        if uuid in self._owned:
            return True
        return uuid in self._pristine and uuid not in self._removed

    def __iter__(self) -> Iterator[str]:
        removed, owned = self._removed, self._owned
        for uuid in self._pristine:
            if uuid not in removed:
                yield uuid
        for uuid in owned:
            if uuid not in self._pristine:
                yield uuid

    def __len__(self) -> int:
        new = sum(1 for uuid in self._owned if uuid not in self._pristine)
        return len(self._pristine) - len(self._removed) + new

    def __repr__(self) -> str:
        return f"ItemMap({len(self)} items, {len(self._owned)} owned)"

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Mapping):
            return dict(self.peek_items()) == dict(other.items())
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable, as a dict

    # -- reading without taking ownership ---------------------------------------

    def peek(self, uuid: str) -> QueueItem | None:
        """The item for reading only: the owned clone if any, else the pristine one."""
        owned = self._owned.get(uuid)
        if owned is not None:
            return owned
        if uuid in self._removed:
            return None
        return self._pristine.get(uuid)

    def peek_values(self) -> Iterator[QueueItem]:
        """Every item for reading only, in the order of :meth:`__iter__`."""
        for _uuid, item in self.peek_items():
            yield item

    def peek_items(self) -> Iterator[tuple[str, QueueItem]]:
        owned, removed = self._owned, self._removed
        for uuid, item in self._pristine.items():
            if uuid not in removed:
                yield uuid, owned.get(uuid, item)
        for uuid, item in owned.items():
            if uuid not in self._pristine:
                yield uuid, item

    def owns(self, uuid: str) -> bool:
        """Whether ``uuid`` was handed out (or added) in this pass: only these can differ."""
        return uuid in self._owned

    def pristine(self, uuid: str) -> QueueItem | None:
        """The item as it was decoded (None for an item this pass added)."""
        return None if uuid in self._removed else self._pristine.get(uuid)

    def owned_uuids(self) -> list[str]:
        """The items handed out or added: the only ones that can differ from the pristine."""
        return list(self._owned)

    def removed_uuids(self) -> list[str]:
        """Pristine items that left the map."""
        return list(self._removed)

    def rebase(self, pristine: Mapping[str, QueueItem], origin: object) -> None:
        """After a commit: ``pristine`` is what is stored now (the owned items stay owned)."""
        self._pristine = pristine
        self._removed = {uuid for uuid in self._removed if uuid in pristine}
        self.origin = origin
