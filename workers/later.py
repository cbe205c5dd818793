"""Calls made a little later, on one thread per process.

A build asks for two delayed calls (the start's nudge, the first progress:
:mod:`workers.notify`) and cancels them most of the time. A
``threading.Timer`` each made and started a thread per call, and
``Thread.start`` waits until the new thread runs: about a tenth of an
executor process's busy time in a no-op build. Here every delayed call of
the process waits in one heap served by one daemon thread, started on
first use and again in a forked child (a thread does not survive a fork).

The thread runs one call at a time, in the order they fall due; a call
that raises is logged. A call cancelled before it falls due never runs; a
call that already started runs to its end (as with ``Timer.cancel``).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)


class DelayedCall:
    """One delayed call; :meth:`cancel` stops it if it has not started."""

    __slots__ = ("args", "cancelled", "function", "name")

    def __init__(self, function: Callable[..., object], args: tuple[Any, ...], name: str) -> None:
        self.function = function
        self.args = args
        self.name = name
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class _Later:
    """The process's heap of delayed calls and the thread that serves it."""

    def __init__(self) -> None:
        self._reset()
        os.register_at_fork(after_in_child=self._reset)

    def _reset(self) -> None:
        self._condition = threading.Condition(threading.Lock())
        self._heap: list[tuple[float, int, DelayedCall]] = []
        self._order = itertools.count()
        self._thread: threading.Thread | None = None

    def call(
        self, delay: float, function: Callable[..., object], *args: Any, name: str
    ) -> DelayedCall:
        call = DelayedCall(function, args, name)
        due = time.monotonic() + delay
        with self._condition:
            heapq.heappush(self._heap, (due, next(self._order), call))
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, name="later", daemon=True)
                self._thread.start()
            elif self._heap[0][2] is call:
                self._condition.notify()  # falls due before what the thread waits for
        return call

    def pending(self) -> int:
        """Calls waiting, cancelled ones included (for tests)."""
        with self._condition:
            return len(self._heap)

    def _serve(self) -> None:
        while True:
            call = self._next()
            if call.cancelled:
                continue
            try:
                call.function(*call.args)
            except Exception:  # one call's failure is its own; the thread serves on
                log.exception("delayed call %s failed", call.name)

    def _next(self) -> DelayedCall:
        with self._condition:
            while True:
                if not self._heap:
                    self._condition.wait()
                    continue
                due, _, call = self._heap[0]
                if call.cancelled:
                    heapq.heappop(self._heap)
                    continue
                wait = due - time.monotonic()
                if wait <= 0:
                    heapq.heappop(self._heap)
                    return call
                self._condition.wait(wait)


_later = _Later()


def call_later(
    delay: float, function: Callable[..., object], *args: Any, name: str = ""
) -> DelayedCall:
    """Call ``function(*args)`` on the process's delayed-call thread in ``delay`` seconds."""
    return _later.call(delay, function, *args, name=name or getattr(function, "__name__", "call"))


def pending_calls() -> int:
    """How many delayed calls wait (cancelled ones drop out when they reach the front)."""
    return _later.pending()
