"""Flags: empty znodes whose existence is the signal (``dirty``, ``cancel``...).

Raising and lowering are idempotent and cost one round trip each. On
SUSPENDED or LOST the call raises (its deadline) and the flag keeps its
previous state, which is always safe for a dirty flag: at worst one extra
processing pass.
"""

from __future__ import annotations

import contextlib

from kazoo.exceptions import NodeExistsError, NoNodeError

from scheduler.zk.client import ZooKeeperClient


def raise_flag(client: ZooKeeperClient, path: str) -> None:
    with contextlib.suppress(NodeExistsError):
        client.create(path, b"", makepath=True)


def lower_flag(client: ZooKeeperClient, path: str) -> None:
    with contextlib.suppress(NoNodeError):
        client.delete(path)


def is_raised(client: ZooKeeperClient, path: str) -> bool:
    return client.exists(path) is not None
