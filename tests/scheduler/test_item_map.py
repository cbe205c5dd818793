"""ItemMap (scheduler/model/item_map.py): pristine items are shared, never handed out."""

from __future__ import annotations

import pytest

from scheduler.model.item import ItemMap, QueueItem
from tests.scheduler.test_state_store import sample_state


def pristine_items() -> dict[str, QueueItem]:
    return dict(sample_state().items.peek_items())


def test_a_lookup_hands_out_a_clone_once() -> None:
    pristine = pristine_items()
    items = ItemMap(pristine=pristine)
    taken = items["i0"]
    assert taken == pristine["i0"] and taken is not pristine["i0"]
    assert items["i0"] is taken and items.get("i0") is taken  # owned from now on
    taken.message = "changed"
    assert pristine["i0"].message == ""  # the shared copy never changes
    assert items.owned_uuids() == ["i0"]


def test_peeking_takes_nothing() -> None:
    pristine = pristine_items()
    items = ItemMap(pristine=pristine)
    assert items.peek("i1") is pristine["i1"]
    assert [item.uuid for item in items.peek_values()] == ["i0", "i1"]
    assert "i1" in items and len(items) == 2
    assert items.owned_uuids() == []
    taken = items["i1"]
    assert items.peek("i1") is taken  # once taken, peeking sees the pass's copy


def test_every_mapping_method_that_hands_out_items_takes_them() -> None:
    items = ItemMap(pristine=pristine_items())
    assert [item.uuid for item in items.values()] == ["i0", "i1"]
    assert sorted(items.owned_uuids()) == ["i0", "i1"]


def test_removed_and_added_items() -> None:
    pristine = pristine_items()
    items = ItemMap(pristine=pristine)
    del items["i0"]
    items.discard("i0")  # already gone: nothing to do
    assert "i0" not in items and items.peek("i0") is None and items.pristine("i0") is None
    with pytest.raises(KeyError):
        items["i0"]
    assert items.get("i0") is None
    new = pristine["i1"].clone()
    new.uuid = "i2"
    items["i2"] = new
    assert list(items) == ["i1", "i2"] and len(items) == 2
    assert items.removed_uuids() == ["i0"]
    assert items.pristine("i2") is None  # added by the pass: nothing to compare with


def test_rebase_keeps_the_pass_copies() -> None:
    items = ItemMap(pristine=pristine_items())
    taken = items["i0"]
    del items["i1"]
    stored = {"i0": taken.clone()}
    items.rebase(stored, origin="after the commit")
    assert items["i0"] is taken and items.pristine("i0") is stored["i0"]
    assert items.removed_uuids() == [] and list(items) == ["i0"]
    assert items.origin == "after the commit"


def test_equality_compares_the_items() -> None:
    pristine = pristine_items()
    assert ItemMap(pristine=pristine) == dict(pristine)
    changed = ItemMap(pristine=pristine)
    changed["i0"].message = "x"
    assert changed != ItemMap(pristine=pristine)
