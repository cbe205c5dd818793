"""Validated once per scope: what one pipeline pass reads from a validated cache.

A process's caches are validated against ZooKeeper before each use
(docs/architecture.md invariant 1); a tenant's layout costs one ``exists`` per use. A
pipeline pass uses it several times (its manager, the merge and build
request formats, the reporters) and commits in one transaction fenced by
the layout state's version, which validates all those uses at once. So a
pass runs inside :func:`validation_scope`, and :func:`once` answers the
second and later asks of a key from the first. Outside a scope every ask
computes (validates) anew. :func:`seed` answers a key in advance from a
read the scope's owner made anyway (the pass reads the layout state's stat
in the same request as its event queues, :mod:`scheduler.zk.multiread`).
Scopes are per thread and context (``contextvars``), never shared between
passes.
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


def seed(key: Hashable, value: object) -> None:
    """Answer ``key`` with ``value`` for the rest of the current scope (none: ignored)."""
    memo = _memo.get()
    if memo is not None:
        memo.setdefault(key, value)


def layout_mzxid_key(tenant: str) -> tuple[str, str]:
    """The key of a tenant's layout state mzxid (``TenantLayouts`` asks it once a scope)."""
    return ("layout-state-mzxid", tenant)
