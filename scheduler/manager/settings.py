"""What a pipeline manager is given: its settings and the services it asks.

:class:`PipelineSettings` is what a manager needs of its pipeline's
configuration (the layouts build it, :mod:`scheduler.layouts.source`); a
:class:`LayoutProvider` freezes an item's jobs under the (possibly
speculative) layout into a :class:`FreezeResult`; a :class:`SemaphoreLedger`
hands out semaphore slots. All are plain values or protocols: a manager
stays pure, and the tests give it fakes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from scheduler.config.model import BatchConfig
from scheduler.manager import events as ev
from scheduler.manager.window import WindowSettings
from scheduler.model.build import JobInfo
from scheduler.model.item import QueueItem
from scheduler.model.nodeset import NodeNames

# (project, branch) -> (shared queue name, per branch), None for a project of its own
QueueNamer = Callable[[str, str], "tuple[str, bool] | None"]


def no_shared_queues(project: str, branch: str) -> tuple[str, bool] | None:
    return None


@dataclass(frozen=True)
class PipelineSettings:
    """What a manager needs of its pipeline's configuration."""

    name: str
    manager: str = "independent"
    dequeue_on_new_patchset: bool = True
    # dependent pipelines: the window of each shared queue
    window: WindowSettings = field(default_factory=WindowSettings)
    # gating: which shared queue a project's items join (Layout.queue_for)
    queue_for: QueueNamer = no_shared_queues
    # a success reporter says ``merge: true``: a passed head item is pushed first
    merge_on_success: bool = False
    # whether the queue of (project, branch) allows circular dependencies
    allows_cycles: Callable[[str, str], bool] = lambda project, branch: False
    # the (name, label) nodes a job's nodeset asks of a launcher; empty: the
    # build request is submitted at once (always so without node providers);
    # the int picks one of the nodeset's alternatives (scheduler.model.nodeset)
    nodes_for: Callable[[JobInfo, int], NodeNames] = lambda job, choice: ()
    # how many alternatives the job's nodeset has (1: none)
    node_choices: Callable[[JobInfo], int] = lambda job: 1
    # node name -> the nodeset groups it is in (the inventory's groups)
    groups_for: Callable[[JobInfo, int], Mapping[str, tuple[str, ...]]] = lambda job, choice: {}
    # the priority of its node requests (Zuul's precedence: high 100, normal 200, low 300)
    node_priority: int = 200
    # dependent pipelines: how the queue of (project, branch) batches its changes
    # (the queue's ``batch``, else the pipeline's; None: one change an item)
    batch_for: Callable[[str, str], BatchConfig | None] = lambda project, branch: None
    # dependent pipelines: how many items behind a failed one may show it flaky first
    pending_failure_for: Callable[[str, str], int] = lambda project, branch: 0
    # dependent pipelines: a failed job is run again to judge the failure
    failure_verdict: bool = False
    # the reporter actions the pipeline has reporters for (scheduler.manager.actions)
    reporter_actions: frozenset[str] = frozenset()
    # Zuul's disable-after-consecutive-failures (None: never disabled)
    disable_after: int | None = None
    # a ``disabled`` reporter says ``merge: true``: a disabled gate still merges
    merge_when_disabled: bool = False


@dataclass(frozen=True)
class FreezeResult:
    """Frozen jobs for an item, or the configuration errors that prevent them."""

    jobs: tuple[JobInfo, ...] = ()
    errors: tuple[str, ...] = ()
    # the project's ``fail-fast`` in this pipeline (the last stanza that sets it)
    fail_fast: bool = False


class LayoutProvider(Protocol):
    def freeze(self, item: QueueItem, outcome: ev.MergeOutcome) -> FreezeResult:
        """The job graph of ``item`` under the (possibly speculative) layout."""


class SemaphoreLedger(Protocol):
    def try_acquire(self, name: str, holder: str) -> bool:
        """Take one slot of semaphore ``name`` for ``holder`` if one is free."""

    def release(self, name: str, holder: str) -> None:
        """Give back ``holder``'s slot (harmless if it holds none)."""


def take_all(ledger: SemaphoreLedger, names: Iterable[str], holder: str) -> str | None:
    """Take a slot of every semaphore in ``names`` for ``holder``, or none of them.

    Returns None when all were taken, else the name that had no free slot
    (those taken before it are given back).
    """
    taken: list[str] = []
    for name in names:
        if not ledger.try_acquire(name, holder):
            for got in taken:
                ledger.release(got, holder)
            return name
        taken.append(name)
    return None
