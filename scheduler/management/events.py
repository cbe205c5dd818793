"""``manage-events``: pause, resume or discard a tenant's trigger and result events.

:func:`manage_events` writes the tenant's event state
(:mod:`scheduler.stores.event_state`); when it sets the trigger queue
discarding it drops what the queue holds at once and says how many, and
when it releases a queue it nudges the tenant hop and every pipeline of the
tenant, so what waited is taken without waiting for the sweep.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from scheduler.management import ManagementError
from scheduler.nudge import dispatch, task_names
from scheduler.settings.sections import Settings
from scheduler.stores import inventory
from scheduler.stores.event_state import (
    EventState,
    discard_trigger_events,
    event_state,
    set_event_state,
)
from scheduler.zk.client import ZooKeeperClient

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EventsManaged:
    """What :func:`manage_events` did: the state now, and how many trigger events it dropped."""

    state: EventState
    discarded: int


def manage_events(
    client: ZooKeeperClient, conf: Settings, tenant: str, wanted: EventState
) -> EventsManaged:
    """Set the tenant's event state to ``wanted``; see the module."""
    before = event_state(client, tenant)
    state = set_event_state(client, tenant, wanted)
    log.info("%s: event state %s (by %s)", tenant, state.to_dict(), wanted.by or "?")
    discarded = 0
    if state.trigger_queue_discarding:
        dropped = discard_trigger_events(client, tenant)
        if dropped is None:
            raise ManagementError(
                f"tenant {tenant!r}: its trigger queue stayed busy; "
                "discarding is set and its events are dropped as the tenant is processed"
            )
        discarded = dropped
    released_triggers = before.trigger_queue_paused and not state.trigger_queue_paused
    if released_triggers or state.trigger_queue_discarding:
        dispatch.send_quickly(task_names.PROCESS_TENANT, tenant, settings=conf)
    if before.result_queue_paused and not state.result_queue_paused:
        for pipeline in inventory.pipelines(client, tenant):
            dispatch.send_quickly(task_names.PROCESS_PIPELINE, tenant, pipeline, settings=conf)
    return EventsManaged(state, discarded)
