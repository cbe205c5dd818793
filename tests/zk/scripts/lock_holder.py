"""Take a lock, report it, then hold it until killed (argv: config, lock path)."""

from __future__ import annotations

import sys

from scheduler.zk import locks
from tests.zk.scripts._common import client_from_argv, say

client = client_from_argv()
held = locks.acquire(client, sys.argv[2], identifier="holder", timeout=30)
assert held is not None
say(f"locked {held.node}")
sys.stdin.readline()
