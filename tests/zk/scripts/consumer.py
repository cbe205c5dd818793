"""A queue consumer competing with others under the queue's lock.

argv: config, queue root, lock path, output file. Each event is acked in a
transaction fenced by the lock that also creates ``/processed/<n>`` (the
"apply"); the event's number is appended to the output file after the commit.
Exits once the queue is empty and ``/producer-done`` exists.
"""

from __future__ import annotations

import sys

from scheduler.zk import locks
from scheduler.zk.event_queue import EventQueue
from tests.zk.scripts._common import client_from_argv, say

client = client_from_argv()
queue = EventQueue(client, sys.argv[2])
lock_path = sys.argv[3]
client.ensure_path("/processed")
say("ready")
with open(sys.argv[4], "a") as out:
    while True:
        held = locks.acquire(client, lock_path, identifier="consumer", timeout=10)
        if held is None:
            continue
        try:
            events = queue.read(limit=7)
            for event in events:
                txn = held.context.transaction()
                queue.ack_ops(event, txn)
                txn.create(f"/processed/{event.payload['n']:05d}")
                txn.commit()
                out.write(f"{event.payload['n']}\n")
                out.flush()
        finally:
            held.release()
        if not events and client.exists("/producer-done"):
            break
say("done")
