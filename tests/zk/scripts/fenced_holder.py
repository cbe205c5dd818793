"""A lock holder that gets paused, then tries to write as if it still held the lock.

argv: config, lock path, state path. Prints ``locked``; after a ``go`` line
on stdin it tries (1) a write through its lock context and (2) a raw
transaction fenced by its old lock node, bypassing every local check, and
prints how each ended.
"""

from __future__ import annotations

import sys
import time

from scheduler.zk import locks, stored
from scheduler.zk.context import Transaction
from scheduler.zk.errors import FencedWriteError, LockLostError, ZooKeeperUnavailableError
from tests.zk.scripts._common import client_from_argv, say

client = client_from_argv()
lock_path, state_path = sys.argv[2], sys.argv[3]
held = locks.acquire(client, lock_path, identifier="A", timeout=30)
assert held is not None
stored.save(held.context, state_path, {"owner": "A"})
say(f"locked {held.node}")
sys.stdin.readline()

try:
    stored.save(held.context, state_path, {"owner": "A-stale"})
    say("context wrote")
except LockLostError as exc:
    say(f"context refused {type(exc).__name__}")

deadline = time.monotonic() + 20
while True:
    txn = Transaction(client, fence=held.node)
    txn.set(state_path, stored.encode({"owner": "A-raw"}))
    try:
        txn.commit()
        say("raw wrote")
        break
    except FencedWriteError:
        say("raw fenced")
        break
    except ZooKeeperUnavailableError:
        if time.monotonic() > deadline:
            say("raw unavailable")
            break
        time.sleep(0.1)
