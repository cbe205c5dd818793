"""Values that belong to one process: made on first use, never inherited across a fork.

A worker process keeps a few things for its whole life: its ZooKeeper
client, its SQL engines, the scheduler's runtime, the merger's repo cache.
Each lives in a :class:`ProcessLocal`. A forked child (a Celery prefork pool
child) starts with none of its parent's values (``os.register_at_fork``
empties them in the child, lock included), and makes its own on first use;
the worker's ``Resources`` bootstep (``workers/bootsteps.py``) and its
pool children's shutdown close them all with :func:`close_all`. Outside a
worker (the CLI, tests) the same values are simply made on first use.
"""

from __future__ import annotations

import logging
import os
import threading
import weakref
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

log = logging.getLogger(__name__)

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

_everything: weakref.WeakSet[ProcessLocal[object, object]] = weakref.WeakSet()


class ProcessLocal(Generic[K, V]):
    """Values of this process by key; ``close`` ends one (at shutdown)."""

    def __init__(self, name: str, close: Callable[[V], object] | None = None) -> None:
        self.name = name
        self.close = close
        self._values: dict[K, V] = {}
        self._lock = threading.Lock()
        _everything.add(self)  # type: ignore[arg-type]
        os.register_at_fork(after_in_child=self._forget)

    def get(self, key: K, make: Callable[[], V]) -> V:
        """The value of ``key`` in this process, made with ``make`` on first use."""
        with self._lock:
            value = self._values.get(key)
            if value is None:
                value = self._values[key] = make()
            return value

    def put(self, key: K, value: V) -> V:
        """Replace the value of ``key`` (closing nothing: the caller decides)."""
        with self._lock:
            self._values[key] = value
            return value

    def values(self) -> list[V]:
        with self._lock:
            return list(self._values.values())

    def close_all(self) -> None:
        """Close every value of this process and forget them."""
        with self._lock:
            values, self._values = list(self._values.values()), {}
        for value in values:
            if self.close is None:
                continue
            try:
                self.close(value)
            except Exception:
                log.warning("closing a %s failed", self.name, exc_info=True)

    def _forget(self) -> None:
        # In a forked child: the parent's values (and possibly its held lock) are not ours.
        self._values = {}
        self._lock = threading.Lock()


def close_all() -> None:
    """Close every process-local value of this process (a worker's shutdown)."""
    for local in list(_everything):
        local.close_all()
