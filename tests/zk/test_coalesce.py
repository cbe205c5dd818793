"""Coalescing nudges (``scheduler.processing.coalesce``) on a real ZooKeeper.

The uncontended nudge takes the lock and never touches the flag; a nudge
that finds the lock held raises the flag and returns, and the holder works
once more after its release, so no nudge is left without a pass after it.
"""

from __future__ import annotations

import pytest

from scheduler.processing.coalesce import run_exclusive
from scheduler.zk import flags, locks
from scheduler.zk.client import ZooKeeperClient

LOCK, FLAG = "/coalesce/lock", "/coalesce/dirty"


def test_an_uncontended_nudge_costs_the_lock_and_one_look(zk: ZooKeeperClient) -> None:
    passes: list[int] = []
    zk.ensure_path("/coalesce")
    with zk.counting_requests() as count:
        assert run_exclusive(zk, LOCK, FLAG, lambda _held: bool(passes.append(1)), lambda: None)
    assert passes == [1]
    # create the holder node, delete it, look at the flag
    assert count.total == 3, count.calls
    assert not flags.is_raised(zk, FLAG)


def test_a_nudge_during_a_pass_gets_a_pass_after_it(zk: ZooKeeperClient) -> None:
    passes: list[str] = []
    renudged: list[bool] = []

    def work(_held: locks.HeldLock) -> bool:
        passes.append("pass")
        if len(passes) == 1:  # another worker's nudge arrives meanwhile
            assert not run_exclusive(zk, LOCK, FLAG, work, lambda: None)
            assert flags.is_raised(zk, FLAG)
        return False

    assert run_exclusive(zk, LOCK, FLAG, work, lambda: renudged.append(True))
    assert passes == ["pass", "pass"]
    assert not flags.is_raised(zk, FLAG)
    assert renudged == []


def test_a_stale_flag_is_lowered_by_the_next_holder(zk: ZooKeeperClient) -> None:
    flags.raise_flag(zk, FLAG)  # left by a worker that died
    passes: list[int] = []
    assert run_exclusive(zk, LOCK, FLAG, lambda _h: bool(passes.append(1)), lambda: None)
    assert len(passes) == 2 and not flags.is_raised(zk, FLAG)


def test_a_failed_pass_leaves_the_flag_raised(zk: ZooKeeperClient) -> None:
    def work(_held: locks.HeldLock) -> bool:
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        run_exclusive(zk, LOCK, FLAG, work, lambda: None)
    assert flags.is_raised(zk, FLAG)
    assert locks.acquire(zk, LOCK, blocking=False) is not None  # released


def test_too_many_passes_hand_over_to_a_new_nudge(zk: ZooKeeperClient) -> None:
    renudged: list[bool] = []
    passes: list[int] = []
    assert run_exclusive(
        zk,
        LOCK,
        FLAG,
        lambda _h: bool(passes.append(1)) or True,
        lambda: renudged.append(True),
        max_passes=3,
    )
    assert len(passes) == 3 and renudged == [True] and flags.is_raised(zk, FLAG)
