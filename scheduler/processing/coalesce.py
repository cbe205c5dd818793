"""Coalescing nudges: one worker processes a thing at a time, no wake-up is lost.

Many nudges for one pipeline may arrive at once (every event sends one).
:func:`run_exclusive` lets exactly one of them work:

1. the nudge raises the thing's *dirty* flag (an empty znode);
2. it tries the lock without waiting; if another worker holds it, it
   returns at once: the holder will see the flag;
3. the holder loops: lower the flag, do one pass; until a pass finds the flag
   still lowered and nothing left to do;
4. after releasing the lock it looks at the flag once more: a nudge that
   raised it between the holder's last look and the release found the lock
   still held and returned, so the holder sends a fresh nudge for it.

Whatever the interleaving, the last nudge is followed by a pass that starts
after it. A worker killed mid-pass leaves the flag raised and its lock gone
with its session; the periodic sweep re-sends a nudge for every raised flag
and non-empty queue (DESIGN.md invariant 2).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable

from scheduler.zk import locks
from scheduler.zk.client import ZooKeeperClient
from scheduler.zk.flags import is_raised, lower_flag, raise_flag

log = logging.getLogger(__name__)

# A pass returns True when it did something (then another pass follows).
Pass = Callable[[locks.HeldLock], bool]


def run_exclusive(
    client: ZooKeeperClient,
    lock_path: str,
    flag: str,
    work: Pass,
    renudge: Callable[[], None],
    *,
    identifier: str = "",
    max_passes: int = 100,
) -> bool:
    """Run ``work`` under ``lock_path`` until quiet; False if another worker had it."""
    raise_flag(client, flag)
    held = locks.acquire(client, lock_path, identifier=identifier, blocking=False)
    if held is None:
        return False
    passes = 0
    try:
        while passes < max_passes:
            lower_flag(client, flag)
            passes += 1
            try:
                busy = work(held)
            except Exception:
                # The pass failed (its task retries or fails): leave the flag
                # raised so the retry, or the sweep, knows the work is not done.
                with contextlib.suppress(Exception):
                    raise_flag(client, flag)
                raise
            if not busy and not is_raised(client, flag):
                break
        else:
            # Fairness: let other pipelines have this worker; continue later.
            raise_flag(client, flag)
    finally:
        held.release()
    if is_raised(client, flag):
        log.debug("%s raised during release: nudging again", flag)
        renudge()
    return True
