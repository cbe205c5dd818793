"""The event state of a tenant: whether its trigger and result event queues are paused.

Zuul's ``manage-events``: an operator pauses a tenant's trigger queue (its
events stay queued, none is matched against the pipelines), its result
queue too (builds' and merges' results stay queued, no pipeline applies
one), or sets the trigger queue discarding (its events are dropped as they
come). ``normal`` undoes all three.

The state is one znode, ``/events/tenant/<tenant>/state``; absent means
normal. The tenant hop (:func:`scheduler.processing.forwarding.process_tenant`)
and the pipeline pass (:func:`scheduler.processing.pipeline.event_queues`)
read it before they take events, so a pause holds from the next hop on;
the events a hop was moving when the pause was written are moved.

:func:`discard_trigger_events` drops what the tenant's trigger queue holds,
under the tenant hop's lock, each batch in one transaction fenced by it (an
event is dropped once, never after the hop moved it): the verb that sets
discarding calls it to say how many it dropped, and the hop calls it while
the tenant discards.
"""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass
from typing import Any

from kazoo.exceptions import NodeExistsError, NoNodeError

from scheduler.zk import locks, paths, stored
from scheduler.zk.client import ZooKeeperClient
from scheduler.zk.context import NO_NODE, OpFailedError
from scheduler.zk.errors import DecodeError, NewerSchemaError
from scheduler.zk.event_queue import EventQueue

log = logging.getLogger(__name__)

MAX_REASON = 1000
# events dropped per transaction
BATCH = 100


@dataclass(frozen=True)
class EventState:
    """Zuul's tenant ``state``: three switches and why they were set."""

    trigger_queue_paused: bool = False
    result_queue_paused: bool = False
    trigger_queue_discarding: bool = False
    reason: str = ""
    # who set it (the token's subject) and when (seconds)
    by: str = ""
    changed: float = 0.0

    @property
    def normal(self) -> bool:
        return not (
            self.trigger_queue_paused or self.result_queue_paused or self.trigger_queue_discarding
        )

    @property
    def holds_triggers(self) -> bool:
        """Whether the tenant hop leaves the trigger queue alone (paused, not discarding)."""
        return self.trigger_queue_paused and not self.trigger_queue_discarding

    def to_dict(self) -> dict[str, Any]:
        """Zuul's fields (as its status shows them), and who set them when."""
        return {
            "trigger_queue_paused": self.trigger_queue_paused,
            "result_queue_paused": self.result_queue_paused,
            "trigger_queue_discarding": self.trigger_queue_discarding,
            "reason": self.reason or None,
            "by": self.by or None,
            "changed": self.changed or None,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EventState:
        return cls(
            trigger_queue_paused=data.get("trigger_queue_paused") is True,
            result_queue_paused=data.get("result_queue_paused") is True,
            trigger_queue_discarding=data.get("trigger_queue_discarding") is True,
            reason=str(data.get("reason") or "")[:MAX_REASON],
            by=str(data.get("by") or ""),
            changed=float(data.get("changed") or 0.0),
        )


NORMAL = EventState()


def event_state(client: ZooKeeperClient, tenant: str) -> EventState:
    """The tenant's event state (normal when none was set)."""
    try:
        raw, _ = client.get(paths.tenant_event_state(tenant))
    except NoNodeError:
        return NORMAL
    return decode_event_state(raw)


def decode_event_state(raw: bytes) -> EventState:
    """The state its znode's data holds (normal when it is not one)."""
    try:
        return EventState.from_dict(stored.decode(raw, "event state"))
    except (DecodeError, NewerSchemaError, TypeError, ValueError) as exc:
        log.error("an event state that cannot be read counts as normal: %s", exc)
        return NORMAL


def set_event_state(client: ZooKeeperClient, tenant: str, state: EventState) -> EventState:
    """Write the tenant's event state (normal: the znode is removed); returns what was written."""
    path = paths.tenant_event_state(tenant)
    if state.normal:
        with contextlib.suppress(NoNodeError):
            client.delete(path)
        return NORMAL
    written = EventState(
        state.trigger_queue_paused,
        state.result_queue_paused,
        state.trigger_queue_discarding,
        state.reason[:MAX_REASON],
        state.by,
        time.time(),
    )
    data = stored.encode(written.to_dict())
    try:
        client.set(path, data)
    except NoNodeError:
        try:
            client.create(path, data, makepath=True)
        except NodeExistsError:  # another operator's write came first: the last one stands
            client.set(path, data)
    return written


def discard_trigger_events(client: ZooKeeperClient, tenant: str, wait: float = 10.0) -> int | None:
    """Drop every event of the tenant's trigger queue; how many (None: the hop's lock stayed
    taken for ``wait`` seconds, nothing dropped)."""
    deadline = time.monotonic() + wait
    while (held := locks.try_exclusive(client, paths.trigger_queue_lock(tenant))) is None:
        if time.monotonic() > deadline:
            return None
        time.sleep(0.05)
    queue = EventQueue(client, paths.tenant_trigger_queue(tenant))
    dropped = 0
    with held:
        while events := queue.read(limit=BATCH):
            txn = held.context.transaction()
            for event in events:
                queue.ack_ops(event, txn)
            try:
                txn.commit()
            except OpFailedError as exc:
                if exc.reason != NO_NODE:
                    raise
                # one went meanwhile (only an ack outside the hop can): one by one
                dropped += sum(queue.ack(event, held.context) for event in events)
                continue
            for event in events:
                queue.discard_data(event)
            dropped += len(events)
    if dropped:
        log.info("%s: %d trigger event(s) discarded", tenant, dropped)
    return dropped
