"""What a processing pass needs from the rest of the system, as small protocols.

The pass itself (:mod:`scheduler.processing.pipeline`) only knows these
interfaces; the scheduler task adapters assemble a real
:class:`Environment` (layouts from the ZooKeeper config cache, request
formats of the merger and executor, the SQL and log reporters, nudges
through Celery), and tests assemble one from simple parts.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from scheduler.manager.base import PipelineManager
from scheduler.manager.events import MergeOutcome
from scheduler.manager.intents import BuildIntent, MergeIntent
from scheduler.model.item import QueueItem
from scheduler.model.results import Result
from scheduler.stores.job_requests import JobRequest
from scheduler.stores.ledger import TxnLedger
from scheduler.wire.events import JobResult
from scheduler.zk.client import ZooKeeperClient

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BuildOutcome:
    """A completed build request's result, in the scheduler's terms."""

    result: Result
    message: str = ""
    start_time: float | None = None
    end_time: float | None = None
    result_data: dict[str, Any] = field(default_factory=dict)
    log_path: str = ""


@dataclass(frozen=True)
class NewRequest:
    request: JobRequest
    params: dict[str, Any]
    queue_root: str


class RequestFormats(Protocol):
    """The wire formats of merge and build requests and their results."""

    def merge(self, tenant: str, pipeline: str, item: QueueItem, intent: MergeIntent) -> NewRequest:
        """The merger request (and its parameters) for a merge intent."""

    def build(self, tenant: str, pipeline: str, item: QueueItem, intent: BuildIntent) -> NewRequest:
        """The executor request (and its parameters) for a build intent."""

    def push(
        self, tenant: str, pipeline: str, item: QueueItem, request_uuid: str, action: str
    ) -> NewRequest:
        """The merger request that pushes an item's tested merge to its branch; the
        forge hears ``action`` (``success``, or ``disabled``) before it merges."""

    def merge_outcome(self, result: JobResult) -> MergeOutcome: ...

    def push_outcome(self, result: JobResult) -> tuple[bool, str]:
        """(pushed, why not) of a completed push request."""

    def build_outcome(self, result: JobResult) -> BuildOutcome: ...


class ManagerSource(Protocol):
    def open(
        self, client: ZooKeeperClient, tenant: str, pipeline: str
    ) -> tuple[PipelineManager, TxnLedger]:
        """The manager of ``pipeline`` under the tenant's current layout, and its ledger."""


class ItemReporter(Protocol):
    def report(self, tenant: str, pipeline: str, item: QueueItem, action: str) -> None:
        """Report a finished item with Zuul's reporter ``action`` (``success``,
        ``failure``, ``dequeue``, ``disabled``, ...: :mod:`scheduler.manager.actions`;
        ``""``: no forge is told); must be idempotent (a crash may repeat it).

        Raises if the report did not land (it is tried again later)."""


class Nudge(Protocol):
    """Send task ``task`` with ``args`` to ``queue`` (None: the task's default route).

    ``label`` says what the task is about, for Flower and logs
    (:mod:`scheduler.nudge.task_labels`); empty, the sender makes one from the arguments.
    """

    def __call__(
        self, task: str, args: Sequence[Any], queue: str | None, /, label: str = ""
    ) -> None: ...


@dataclass
class Environment:
    client: ZooKeeperClient
    managers: ManagerSource
    formats: RequestFormats
    nudge: Nudge
    reporters: Sequence[ItemReporter] = ()
    # nudge a pipeline (tenant, pipeline) again after a delay in seconds (a waiting
    # batch); None: the sweep does, by the pipeline's retry flag
    nudge_later: Callable[[str, str, float], None] | None = None

    def report(self, tenant: str, pipeline: str, item: QueueItem, action: str) -> str:
        """Run every reporter; "" if all landed, else why not (the item is reported again).

        A failing reporter is logged and never stops the others; every
        reporter is idempotent, so the retry repeats the ones that landed
        harmlessly.
        """
        errors: list[str] = []
        for reporter in self.reporters:
            try:
                reporter.report(tenant, pipeline, item, action)
            except Exception as exc:  # a hook boundary: log it, go on (STYLE.md habit 8)
                log.warning(
                    "reporter %s failed for item %s of %s/%s (retried later): %s",
                    type(reporter).__name__,
                    item.uuid,
                    tenant,
                    pipeline,
                    exc,
                )
                errors.append(f"{type(reporter).__name__}: {exc}")
        return "; ".join(errors)

    def announce(self, tenant: str, pipeline: str, item: QueueItem, action: str) -> None:
        """Tell the reporters that can (a forge's ``enqueue:`` and ``start:``) that
        ``item`` was enqueued or its testing began.

        Best effort: a failure is logged; the item's result is reported anyway.
        """
        for reporter in self.reporters:
            announce = getattr(reporter, "announce", None)
            if announce is None:
                continue
            try:
                announce(tenant, pipeline, item, action)
            except Exception as exc:  # a hook boundary: log it, go on
                log.warning(
                    "%s report of item %s of %s/%s failed: %s",
                    action,
                    item.uuid,
                    tenant,
                    pipeline,
                    exc,
                )
