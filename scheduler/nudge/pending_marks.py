"""One waiting nudge per pipeline: a result's nudge is skipped while another waits.

Every build and merge that ends nudges its pipeline
(:func:`scheduler.nudge.dispatch.notify_pipeline`): one ``process_pipeline``
task per result. When results come faster than
the scheduler passes over them, the nudges wait in the broker's queue, and
each one that runs after the first finds the results already applied: a
task, a lock taken and given back and a pass that finds nothing, for
nothing. So the sender of a result's nudge first marks the pipeline's
nudge as waiting in Redis (``SET NX`` with a time to live); if a mark is
there already, a nudge is waiting that has not started, and it is not sent
again. The ``process_pipeline`` task deletes the mark as it starts
(:func:`started`), before it looks at any queue.

**No lost wake-up.** A sender skips only when the mark exists. The mark
was set by a sender whose nudge had not started when the skip happened
(a nudge deletes the mark when it starts, and the mark was not deleted
since it was set). That nudge starts after the skip, so its pass reads the
queues after the skipping sender's result was committed to ZooKeeper (the
result is written before the mark is looked at). A pass that finds the
pipeline's lock held raises its dirty flag, as every nudge does
(:mod:`scheduler.processing.coalesce`).

**Failures cost time, never events.** A nudge that is lost after its mark
was set (the queue purged, the sender killed between the mark and the
send) holds back the pipeline's next result nudges for at most
:data:`TTL_MS`; the periodic sweep nudges pipelines with waiting events
all the same. A mark that cannot be set (Redis away) sends the nudge, as
before, and pauses the process's fast way as a failed push does (so the
next results do not wait for Redis each); a mark that cannot be deleted
expires. A nudge that waits longer than the time to live (a long backlog)
lets one more through: a duplicate, which is harmless. A sender marks only
with a plain ``redis://`` broker and ``broker.fast_send`` on
(:mod:`scheduler.nudge.kept_connection`'s connection), otherwise every result sends its
nudge; the task deletes the mark with any ``redis://`` broker.
"""

from __future__ import annotations

import logging

import redis

from scheduler.nudge import kept_connection
from scheduler.settings.sections import Settings
from scheduler.zk import paths

log = logging.getLogger(__name__)

# How long a mark holds back a pipeline's result nudges if its nudge never starts.
TTL_MS = 2000
PREFIX = "sluice:nudge-waiting:"


def mark_key(tenant: str, pipeline: str) -> str:
    """The mark's Redis key: the pipeline's result queue path names it without ambiguity."""
    return PREFIX + paths.pipeline_result_queue(tenant, pipeline)


def _sender(settings: Settings) -> kept_connection.Pusher | None:
    if not settings.broker.fast_send:
        return None
    sender = kept_connection.pusher(settings.broker_url)
    return sender if sender.client is not None else None


def should_send(settings: Settings, tenant: str, pipeline: str) -> bool:
    """Mark the pipeline's nudge as waiting; False if one already waits (skip this one).

    While the process's fast way is paused after a failure (:mod:`scheduler.nudge.kept_connection`),
    nothing is marked and every nudge is sent: a broker that is away costs
    one failed attempt, not one per result.
    """
    sender = _sender(settings)
    if sender is None or not sender.ready:
        return True
    return sender.set_if_absent(mark_key(tenant, pipeline), TTL_MS) is not False


def started(settings: Settings, tenant: str, pipeline: str) -> None:
    """A nudge of the pipeline starts: the next result must nudge again.

    Whatever this process's ``broker.fast_send`` says, with any ``redis://``
    broker: the senders' settings may differ from the scheduler's, and a mark
    nobody deletes would hold nudges back. Tried even while the fast way is
    paused: the task ran, so the broker answers.
    """
    client = kept_connection.pusher(settings.broker_url).client
    if client is None:
        return
    try:
        client.delete(mark_key(tenant, pipeline))
    except (redis.RedisError, OSError) as exc:  # it expires after TTL_MS
        log.warning("nudge mark of %s/%s not deleted: %s", tenant, pipeline, exc)
