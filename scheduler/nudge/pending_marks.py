"""One waiting nudge per hop: a nudge is skipped while another of the same hop waits.

Every build and merge that ends nudges its pipeline
(:func:`scheduler.nudge.dispatch.notify_pipeline`): one ``process_pipeline``
task per result; every webhook nudges its connection's hop, every hop the
next one (a connection's the tenants it filled, a tenant's the pipelines).
When these come faster than the scheduler runs them, the nudges wait in
the broker's queue, and each one that runs after the first finds the
events already moved or applied: a task, a lock taken and given back and
a pass that finds nothing, for nothing, and more of them the further the
scheduler falls behind. So the sender of a nudge first marks the hop's
nudge as waiting in Redis (``SET NX`` with a time to live); if a mark is
there already, a nudge is waiting that has not started, and it is not
sent again. The task deletes its hop's mark as it starts (:func:`started`,
:func:`hop_started`), before it looks at any queue.

The hops with a mark (:func:`hop_key`): a pipeline (``process_pipeline``,
keyed by its result queue, whatever queue the event is in), a tenant
(``process_tenant``, keyed by its trigger queue) and a connection
(``forward_connection_events``, keyed by its event queue). Delayed nudges
(a build's start, a deferred delivery's back-off) and the sweep's are
always sent and set no mark.

**No lost wake-up.** A sender skips only when the mark exists. The mark
was set by a sender whose nudge had not started when the skip happened
(a nudge deletes the mark when it starts, and the mark was not deleted
since it was set). That nudge starts after the skip, so its task reads the
queues after the skipping sender's event was committed to ZooKeeper (the
event is written before the mark is looked at). A task that finds the
hop's lock held raises the pipeline's dirty flag, or leaves the events to
the holder, which looks at its queue again after releasing the lock
(:mod:`scheduler.processing.coalesce`, :mod:`scheduler.processing.forwarding`).

**Failures cost time, never events.** A nudge that is lost after its mark
was set (the queue purged, the sender killed between the mark and the
send) holds back the hop's next nudges for at most :data:`TTL_MS`; the
periodic sweep nudges every hop with waiting events all the same. A mark
that cannot be set (Redis away) sends the nudge, as before, and pauses the
process's fast way as a failed push does (so the next nudges do not wait
for Redis each); a mark that cannot be deleted expires. A nudge that waits
longer than the time to live (a long backlog) lets one more through: a
duplicate, which is harmless. A sender marks only with a plain
``redis://`` broker and ``broker.fast_send`` on
(:mod:`scheduler.nudge.kept_connection`'s connection), otherwise every
nudge is sent; the task deletes the mark with any ``redis://`` broker.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import redis

from scheduler.nudge import kept_connection, task_names
from scheduler.settings.sections import Settings
from scheduler.zk import paths

log = logging.getLogger(__name__)

# How long a mark holds back a hop's nudges if its nudge never starts.
TTL_MS = 2000
PREFIX = "sluice:nudge-waiting:"


def mark_key(tenant: str, pipeline: str) -> str:
    """A pipeline's mark: its result queue's path names it without ambiguity."""
    return PREFIX + paths.pipeline_result_queue(tenant, pipeline)


def hop_key(task: str, args: Sequence[object]) -> str | None:
    """The mark of the hop the nudge ``task(*args)`` wakes; None for a task without one."""
    names = [a for a in args if isinstance(a, str) and a]
    if len(names) != len(args):
        return None
    if task == task_names.PROCESS_PIPELINE and len(names) == 2:
        return mark_key(names[0], names[1])
    if task == task_names.PROCESS_TENANT and len(names) == 1:
        return PREFIX + paths.tenant_trigger_queue(names[0])
    if task == task_names.FORWARD_CONNECTION_EVENTS and len(names) == 1:
        return PREFIX + paths.connection_event_queue(names[0])
    return None


def _sender(settings: Settings) -> kept_connection.Pusher | None:
    if not settings.broker.fast_send:
        return None
    sender = kept_connection.pusher(settings.broker_url)
    return sender if sender.client is not None else None


def should_send(settings: Settings, tenant: str, pipeline: str) -> bool:
    """Mark the pipeline's nudge as waiting; False if one already waits (skip this one)."""
    return _should_send(settings, mark_key(tenant, pipeline))


def should_send_hop(settings: Settings, task: str, args: Sequence[object]) -> bool:
    """Mark the nudge ``task(*args)`` as waiting; False if one of its hop already waits.

    True for a task without a hop's mark (:func:`hop_key`): it is always sent.
    """
    key = hop_key(task, args)
    return True if key is None else _should_send(settings, key)


def _should_send(settings: Settings, key: str) -> bool:
    """Set the mark ``key``; False if it was set already (a nudge waits: skip this one).

    While the process's fast way is paused after a failure (:mod:`scheduler.nudge.kept_connection`),
    nothing is marked and every nudge is sent: a broker that is away costs
    one failed attempt, not one per nudge.
    """
    sender = _sender(settings)
    if sender is None or not sender.ready:
        return True
    return sender.set_if_absent(key, TTL_MS) is not False


def hop_started(settings: Settings, task: str, args: Sequence[object]) -> None:
    """A nudge ``task(*args)`` starts: the next event of its hop must nudge again."""
    key = hop_key(task, args)
    if key is not None:
        _delete(settings, key)


def started(settings: Settings, tenant: str, pipeline: str) -> None:
    """A nudge of the pipeline starts: the next result must nudge again.

    Whatever this process's ``broker.fast_send`` says, with any ``redis://``
    broker: the senders' settings may differ from the scheduler's, and a mark
    nobody deletes would hold nudges back. Tried even while the fast way is
    paused: the task ran, so the broker answers.
    """
    _delete(settings, mark_key(tenant, pipeline))


def _delete(settings: Settings, key: str) -> None:
    client = kept_connection.pusher(settings.broker_url).client
    if client is None:
        return
    try:
        client.delete(key)
    except (redis.RedisError, OSError) as exc:  # it expires after TTL_MS
        log.warning("nudge mark %s not deleted: %s", key, exc)
