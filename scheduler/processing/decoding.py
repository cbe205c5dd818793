"""A pipeline pass's result events decoded into what its manager applies.

The events of a pipeline's result queue are small (:mod:`scheduler.wire.events`):
they name a request (merge, build, push) or a node request and its buildset.
:class:`EventDecoder` reads what they point to (a completed request's
result, a fulfilled node request's nodes) and gives the manager its event
(:mod:`scheduler.manager.events`), or a :class:`PushOutcome` for a merge
push, or None for an event that is stale (its item left, or its buildset was
reset) or malformed (logged and dropped). Node requests that will never be
accepted are noted in ``node_deletes`` for the pass to delete after its
commit. Used by :mod:`scheduler.processing.pipeline`.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import partial

from scheduler.manager import events as ev
from scheduler.model.item import PipelineState, QueueItem
from scheduler.processing.environment import Environment
from scheduler.stores.job_requests import JobRequestQueue
from scheduler.stores.node_records import NodeRequestState
from scheduler.stores.nodes import NodeStore
from scheduler.wire import events as wire_events
from scheduler.wire.events import (
    Dequeue,
    Enqueue,
    MalformedEventError,
    NodeRequestMessage,
    Promote,
    RequestEvent,
    RequestMessage,
)
from scheduler.zk import paths
from scheduler.zk.event_queue import Event

log = logging.getLogger(__name__)


@dataclass
class EventDecoder:
    """Decodes one pass's result events against its state (read only)."""

    env: Environment
    pipeline: str
    # node requests to delete after the commit (stale or failed answers)
    node_deletes: list[str] = field(default_factory=list)

    def decode(self, state: PipelineState, event: Event) -> ev.PipelineEvent | PushOutcome | None:
        try:
            decoded = wire_events.decode(event.payload)
        except MalformedEventError as exc:
            log.error("%s: dropping malformed event %s: %s", self.pipeline, event.path, exc)
            return None
        if isinstance(decoded, RequestMessage):
            return self._request_event(state, decoded)
        if isinstance(decoded, NodeRequestMessage):
            return self._nodes_event(state, decoded)
        if isinstance(decoded, Enqueue | Dequeue | Promote):
            return decoded
        log.error("%s: dropping %s, not a pipeline event: %s", self.pipeline, event.path, decoded)
        return None

    def _request_event(
        self, state: PipelineState, message: RequestMessage
    ) -> ev.PipelineEvent | PushOutcome | None:
        queue_root = message.queue
        request = message.request
        buildset = message.buildset
        item = _item_of_buildset(state.items.peek_values(), buildset)  # (read only)
        if item is None:
            return None  # the buildset was reset or the item left: stale
        kind = message.kind
        requests = JobRequestQueue(self.env.client, queue_root)
        if queue_root == paths.merger_queue():
            return self._merge_event(requests, message, item)
        job = message.job
        if kind is RequestEvent.STARTED:
            started = message.moment or time.time()  # the claim's moment (applied late)
            return ev.BuildStarted(request, item.uuid, buildset, job, started, message.worker)
        if kind is RequestEvent.PAUSED:
            data = requests.paused_data(request)
            return ev.BuildPaused(request, item.uuid, buildset, job, data)
        if kind is RequestEvent.PREFAILED:
            return ev.BuildPreFailed(request, item.uuid, buildset, job)
        return self._build_completed(requests, message, item)

    def _build_completed(
        self, requests: JobRequestQueue, message: RequestMessage, item: QueueItem
    ) -> ev.BuildCompleted | None:
        result = message.outcome or requests.get_result(message.request)
        if result is None:
            return None
        outcome = self.env.formats.build_outcome(result)
        return ev.BuildCompleted(
            message.request,
            item.uuid,
            message.buildset,
            message.job,
            outcome.result,
            outcome.message,
            outcome.start_time,
            outcome.end_time,
            outcome.result_data,
            outcome.log_path,
        )

    def _nodes_event(
        self, state: PipelineState, message: NodeRequestMessage
    ) -> ev.NodesAnswered | None:
        """A node request's outcome; a fulfilled one carries its nodes as read now."""
        item = _item_of_buildset(state.items.peek_values(), message.buildset)  # (read only)
        if item is None:
            self.node_deletes.append(message.request)  # stale: nobody will accept its nodes
            return None
        answered = partial(
            ev.NodesAnswered, message.request, item.uuid, message.buildset, message.job
        )
        if message.state != NodeRequestState.FULFILLED:
            self.node_deletes.append(message.request)  # answered: the requestor deletes it
            return answered(False, message.reason or "NODE_FAILURE")
        store = NodeStore(self.env.client)
        request = store.request(message.request)
        if request is None or request.state != NodeRequestState.FULFILLED:
            return answered(False, f"NODE_FAILURE: node request {message.request} is gone")
        found = {node.id: node for node in store.nodes(request.nodes)}
        if len(found) != len(request.nodes):
            return answered(False, f"NODE_FAILURE: nodes of {message.request} are gone")
        nodes = tuple(
            {
                "id": node.id,
                "label": node.label,
                "host": node.host,
                "connection": dict(node.connection),
            }
            for node in (found[i] for i in request.nodes)
        )
        return answered(True, nodes=nodes)

    def _merge_event(
        self, requests: JobRequestQueue, message: RequestMessage, item: QueueItem
    ) -> ev.PipelineEvent | PushOutcome | None:
        if message.kind is not RequestEvent.COMPLETED:
            return None
        request = message.request
        result = message.outcome or requests.get_result(request)
        if result is None:
            return None
        if request == push_request_uuid(item):
            if result.lost:
                return PushOutcome(item.uuid, False, "the merger pushing it was lost")
            pushed, why = self.env.formats.push_outcome(result)
            return PushOutcome(item.uuid, pushed, why)
        outcome = (
            ev.MergeOutcome(ok=False, lost=True)
            if result.lost
            else self.env.formats.merge_outcome(result)
        )
        return ev.MergeCompleted(item.uuid, message.buildset, request, outcome)


@dataclass(frozen=True)
class PushOutcome:
    """The answer to an item's merge push (applied with merge_pushed / merge_failed)."""

    item: str
    pushed: bool
    message: str = ""


_PUSH_NAMESPACE = uuid.UUID("6f1d9a4e-54a3-4d3c-9c0e-2b7f1c5d9a10")


def push_request_uuid(item: QueueItem) -> str:
    """The push request of an item's buildset: one per buildset, whatever the passes."""
    return uuid.uuid5(_PUSH_NAMESPACE, item.buildset.uuid).hex


def _item_of_buildset(items: Iterable[QueueItem], buildset: str) -> QueueItem | None:
    """The item tested by ``buildset``, or judging its failure with it (a probe's)."""
    for item in items:
        if item.buildset.uuid == buildset or (item.probes and item.probe(buildset)):
            return item
    return None
