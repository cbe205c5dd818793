"""Delayed calls on one thread per process (workers/later.py)."""

from __future__ import annotations

import os
import threading
import time

from tests.fixtures.waiting import wait_until
from workers.later import call_later, pending_calls


def test_many_calls_one_thread_in_the_order_they_fall_due() -> None:
    ran: list[tuple[str, str]] = []
    before = threading.active_count()

    def note(label: str) -> None:
        ran.append((label, threading.current_thread().name))

    calls = [
        call_later(delay, note, label) for delay, label in ((0.3, "c"), (0.1, "a"), (0.2, "b"))
    ]
    assert threading.active_count() <= before + 1  # at most the one thread, started once
    wait_until(lambda: len(ran) == 3, 5, "the three calls")
    assert ran == [("a", "later"), ("b", "later"), ("c", "later")]
    assert all(call.name == "note" for call in calls)


def test_a_cancelled_call_never_runs_and_a_failing_one_stops_nothing() -> None:
    ran: list[str] = []

    def fail() -> None:
        raise RuntimeError("boom")

    cancelled = call_later(0.05, ran.append, "cancelled")
    call_later(0.05, fail)
    call_later(0.1, ran.append, "after")
    cancelled.cancel()
    wait_until(lambda: ran == ["after"], 5, "the call after the failing one")
    time.sleep(0.1)
    assert ran == ["after"]
    wait_until(lambda: pending_calls() == 0, 5, "nothing left waiting")


def test_a_forked_child_serves_its_own_calls() -> None:
    call_later(0.01, lambda: None)  # the parent's thread is running
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: the parent's thread is not here; a new one is started
        try:
            call_later(0.01, os.write, write, b"ok")
            time.sleep(2)
        finally:
            os._exit(0)
    os.close(write)
    try:
        assert os.read(read, 2) == b"ok"
    finally:
        os.close(read)
        os.waitpid(pid, 0)
