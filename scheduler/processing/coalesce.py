"""Coalescing nudges: one worker processes a thing at a time, no wake-up is lost.

Many nudges for one pipeline may arrive at once (every event sends one).
:func:`run_exclusive` lets exactly one of them work:

1. the nudge tries the lock without waiting (:func:`~scheduler.zk.locks.try_exclusive`:
   one create, no listing); with it, it works at once (the flag is not
   touched: the uncontended case costs the lock's create and delete and
   one look at the flag);
2. without it, it raises the thing's *dirty* flag (an empty znode) and
   tries the lock once more (the holder may have released it meanwhile,
   looking at the flag before it was raised); if it is still held, it
   returns: the holder will see the flag;
3. the holder works, pass after pass while a pass says there is more;
4. after releasing the lock it looks at the flag: raised, a nudge came
   while it held the lock, so it takes the lock again, lowers the flag and
   works again; if another worker took the lock meanwhile, that one will
   see the flag when it releases.

Whatever the interleaving, the last nudge is followed by a pass that starts
after it: a pass starts after the lock was taken, and a flag is lowered
only right before a pass by the lock's holder. A pass that fails raises the
flag; a worker killed mid-pass is redelivered (``acks_late``) and its queues
are still full, which the periodic sweep re-nudges (docs/architecture.md invariant 2).
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
    held = locks.try_exclusive(client, lock_path, identifier)
    lower = False
    if held is None:
        raise_flag(client, flag)
        held = locks.try_exclusive(client, lock_path, identifier)
        if held is None:
            return False  # the holder sees the flag after its release
        lower = True
    passes = 0
    while True:
        try:
            if lower:
                lower_flag(client, flag)
            passes = _work_until_quiet(client, held, flag, work, passes=passes, limit=max_passes)
        finally:
            held.release()
        if passes >= max_passes:
            # Fairness: let other pipelines have this worker; continue later.
            renudge()
            return True
        if not is_raised(client, flag):
            return True
        # A nudge came while we held the lock: its events may be unseen.
        held = locks.try_exclusive(client, lock_path, identifier)
        if held is None:
            log.debug("%s raised during release; the new holder sees it", flag)
            return True
        lower = True


def _work_until_quiet(
    client: ZooKeeperClient, held: locks.HeldLock, flag: str, work: Pass, *, passes: int, limit: int
) -> int:
    """Passes while a pass says there is more (at most ``limit`` in all); the new count."""
    while passes < limit:
        passes += 1
        try:
            busy = work(held)
        except Exception:
            # The pass failed (its task retries or fails): raise the flag so
            # the retry, or the sweep, knows the work is not done.
            with contextlib.suppress(Exception):
                raise_flag(client, flag)
            raise
        if not busy:
            break
    if passes >= limit:
        raise_flag(client, flag)  # the sweep or the renudge continues
    return passes
