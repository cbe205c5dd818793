"""Validated once per scope: what one pipeline pass reads from a validated cache.

A process's caches are validated against ZooKeeper before each use
(DESIGN.md invariant 1); a tenant's layout costs one ``exists`` per use. A
pipeline pass uses it several times (its manager, the merge and build
request formats, the reporters) and commits in one transaction fenced by
the layout state's version, which validates all those uses at once. So a
pass runs inside :func:`validation_scope`, and :func:`once` answers the
second and later asks of a key from the first. Outside a scope every ask
computes (validates) anew. Scopes are per thread and context
(``contextvars``), never shared between passes.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, TypeVar

T = TypeVar("T")

_memo: ContextVar[dict[Hashable, Any] | None] = ContextVar("sluice_validation_scope", default=None)


@contextmanager
def validation_scope() -> Iterator[None]:
    """Within it, :func:`once` computes each key once."""
    token = _memo.set({})
    try:
        yield
    finally:
        _memo.reset(token)


def once(key: Hashable, compute: Callable[[], T]) -> T:
    """``compute()``, or what it gave for ``key`` earlier in the current scope."""
    memo = _memo.get()
    if memo is None:
        return compute()
    if key not in memo:
        memo[key] = compute()
    value: T = memo[key]
    return value
