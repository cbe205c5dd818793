"""``manage-events`` over HTTP: ``POST /api/tenant/<t>/state`` (Zuul's path and body).

An admin verb: the body's three switches (``trigger_queue_paused``,
``result_queue_paused``, ``trigger_queue_discarding``) and ``reason`` become
the tenant's event state (:mod:`scheduler.management.events`); the answer is
that state with ``discarded``, the number of queued trigger events dropped.
"""

from __future__ import annotations

from typing import Any

from scheduler.management.events import manage_events
from scheduler.stores.event_state import MAX_REASON, EventState
from web.endpoints import Call, Param
from web.rest import API, T, tenant_of

SWITCHES = ("trigger_queue_paused", "result_queue_paused", "trigger_queue_discarding")


@API.post(
    T + "/state",
    admin=True,
    body=(
        *(Param(name, bool) for name in SWITCHES),
        Param("reason", pattern=rf"[^\x00-\x1f]{{1,{MAX_REASON}}}"),
    ),
)
def tenant_state(call: Call) -> Any:
    """Pause, resume or discard the tenant's trigger and result events (``manage-events``)."""
    ctx, tenant = tenant_of(call)
    wanted = EventState(
        trigger_queue_paused=call.get("trigger_queue_paused", False),
        result_queue_paused=call.get("result_queue_paused", False),
        trigger_queue_discarding=call.get("trigger_queue_discarding", False),
        reason=call.get("reason", ""),
        by=str(call.claims.get("sub", "")),
    )
    done = manage_events(ctx.client, ctx.settings, tenant, wanted)
    return {**done.state.to_dict(), "discarded": done.discarded}
