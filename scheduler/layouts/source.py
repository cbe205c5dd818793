"""The processing seam: managers, frozen jobs and semaphore ledgers from the tenant layout.

:class:`LayoutManagerSource` implements
:class:`scheduler.processing.environment.ManagerSource`: for a tenant and a
pipeline it returns the pipeline's manager (by its ``manager`` setting),
configured from the current layout (:class:`~scheduler.layouts.cache.TenantLayouts`,
validated against ZooKeeper on every ``open``), and a
:class:`~scheduler.stores.ledger.TxnLedger` with the layout's
semaphore maxima.

The manager's settings come from the layout (:func:`pipeline_settings`):
the window, the shared queue of a project (``Layout.queue_for``) and
whether a success reporter merges (``merge: true``). Its
:class:`LayoutFreezer` freezes an item's job graph after its merge, with
the project's ``fail-fast``. When the merge's config files differ from the branch files the
layout was built from, the item runs with a speculative layout and the
errors its files introduce become the item's result
(``FreezeResult.errors``, each ``file:line: ...``); the tenant's layout is
not touched.

``MergeOutcome.config_files`` keys are ``"<project>@<branch>"`` with the
project's name in the tenant (unique within a tenant; use
:func:`config_files_key`). A merger reads the Zuul/Sluice config paths of
the merged tree (``zuul.yaml``, ``zuul.d/``, ``.zuul.yaml``, ``.zuul.d/``,
``.sluice.yaml``); files of the tenant's ``extra-config-paths`` are taken
from the layout's branch when the merger did not send them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from scheduler.config import (
    ConfigError,
    FrozenJob,
    JobGraph,
    Layout,
    Pipeline,
    UnparsedBranch,
    Window,
)
from scheduler.config import speculative_layout as build_speculative
from scheduler.config.checkout import candidate_paths
from scheduler.config.graph import freeze_job_graph
from scheduler.config.model import BatchConfig, Dependency
from scheduler.layouts.cache import TenantLayouts
from scheduler.layouts.errors import UnsupportedManagerError
from scheduler.layouts.state import TenantLayout
from scheduler.manager import manager_class
from scheduler.manager.base import PipelineManager
from scheduler.manager.events import MergeOutcome
from scheduler.manager.retiring import NoLayout, RetiringManager
from scheduler.manager.settings import FreezeResult, PipelineSettings
from scheduler.manager.window import WindowSettings
from scheduler.model.build import JobInfo
from scheduler.model.item import QueueItem
from scheduler.model.nodeset import (
    NodeNames,
    nodeset_alternatives,
    nodeset_groups,
    nodeset_nodes,
)
from scheduler.stores.ledger import TxnLedger
from scheduler.wire.merger import split_config_files_key
from scheduler.zk import paths
from scheduler.zk.client import ZooKeeperClient


def job_info(job: FrozenJob, graph: JobGraph) -> JobInfo:
    """What scheduling needs of a frozen job; ``spec`` is its plain form, for the executor."""
    soft = {d.name: d.soft for d in job.dependencies}
    return JobInfo(
        name=job.name,
        dependencies=tuple(
            Dependency(name, soft.get(name, False)) for name in graph.dependencies[job.name]
        ),
        voting=job.voting,
        attempts=job.attempts,
        semaphores=tuple(s.name for s in job.semaphores),
        zone=job.zone,
        spec=job.to_dict(),
        projects=job.projects_used(),
        provides=job.provides,
        requires=job.requires,
    )


class ProjectsNeeded:
    """Which projects the jobs of an item need, by the tenant's current layout.

    A merge reports these besides the changes' projects (the config project
    holding a base job's steps, required projects), so the item's repo state
    holds them without a second round trip. Computed once per layout,
    project, branch and pipeline (file matchers ignored: a superset).
    """

    def __init__(self, layouts: Callable[[str], TenantLayout]) -> None:
        self.layouts = layouts
        self._memo: dict[tuple[str, str, str, str], tuple[Layout, tuple[str, ...]]] = {}

    def __call__(self, tenant: str, project: str, branch: str, pipeline: str) -> tuple[str, ...]:
        layout = self.layouts(tenant).layout
        key = (tenant, project, branch, pipeline)
        found = self._memo.get(key)
        if found is not None and found[0] is layout:
            return found[1]
        try:
            graph = freeze_job_graph(layout, project, branch, pipeline, None)
            needed = tuple(sorted({p for job in graph.jobs for p in job.projects_used()}))
        except ConfigError:
            needed = ()  # the item's freeze reports it
        self._memo[key] = (layout, needed)
        return needed


def _proposed(
    layout: TenantLayout, config_files: Mapping[str, Mapping[str, str]]
) -> list[UnparsedBranch]:
    """The item's branches whose config differs from the layout's (its proposals)."""
    projects = [p.name for p in layout.tenant.projects]
    proposed: list[UnparsedBranch] = []
    for key in sorted(config_files):
        where = split_config_files_key(key, projects)
        if where is None:
            continue  # not a project of this tenant
        base = dict(layout.branch_files(*where) or {})
        files = {p: t for p, t in base.items() if not candidate_paths([p])}
        files.update(config_files[key])
        if files != base:
            proposed.append(UnparsedBranch(where[0], where[1], files))
    return proposed


class LayoutFreezer:
    """The :class:`~scheduler.manager.settings.LayoutProvider` of one pipeline."""

    def __init__(self, layout: TenantLayout, pipeline: str) -> None:
        self.tenant_layout = layout
        self.pipeline = pipeline

    def layout_for(self, outcome: MergeOutcome) -> tuple[Layout, tuple[ConfigError, ...]]:
        """The layout an item runs with, and the config errors its files introduce."""
        proposed = _proposed(self.tenant_layout, outcome.config_files)
        if not proposed:
            return self.tenant_layout.layout, ()
        tenant_layout = self.tenant_layout
        speculative = build_speculative(tenant_layout.tenant, tenant_layout.branches, proposed)
        return speculative.result.layout, speculative.errors

    def freeze(self, item: QueueItem, outcome: MergeOutcome) -> FreezeResult:
        layout, errors = self.layout_for(outcome)
        if errors:
            return FreezeResult(errors=tuple(e.text() for e in errors))
        change = item.change
        try:
            graph = freeze_job_graph(
                layout, change.project, change.branch, self.pipeline, outcome.files or None
            )
        except ConfigError as exc:
            return FreezeResult(errors=(exc.text(),))
        return FreezeResult(
            jobs=tuple(job_info(job, graph) for job in graph.jobs),
            fail_fast=fail_fast(layout, change.project, change.branch, self.pipeline),
        )


def fail_fast(layout: Layout, project: str, branch: str, pipeline: str) -> bool:
    """The project's ``fail-fast`` in ``pipeline``: the last stanza that sets it wins."""
    value = False
    for _, project_pipeline in layout.project_pipelines(project, branch, pipeline):
        if project_pipeline.fail_fast is not None:
            value = project_pipeline.fail_fast
    return value


def window_settings(window: Window | None) -> WindowSettings:
    """A dependent pipeline's window (Zuul's defaults when it sets none)."""
    window = window or Window()
    return WindowSettings(
        window=window.window,
        floor=window.floor,
        ceiling=window.ceiling,
        increase_type=window.increase_type,
        increase_factor=window.increase_factor,
        decrease_type=window.decrease_type,
        decrease_factor=window.decrease_factor,
    )


def merges_on_success(config: Pipeline, action: str = "success") -> bool:
    """A reporter of ``action`` says ``merge: true`` (git, GitHub, GitLab)."""
    return any(
        isinstance(options, Mapping) and options.get("merge") is True
        for options in config.reporters.get(action, {}).values()
    )


# Node request priorities by pipeline precedence (lower first, as Zuul's).
NODE_PRIORITIES = {"high": 100, "normal": 200, "low": 300}


def pipeline_settings(layout: Layout, config: Pipeline, nodes: bool = False) -> PipelineSettings:
    """What the pipeline's manager needs of the layout.

    ``nodes``: the deployment configures node providers, so a job whose
    nodeset names labelled nodes gets them from a node request first.
    """
    named = {name: nodeset.spec for name, nodeset in layout.nodesets.items()}

    def nodes_for(job: JobInfo, choice: int) -> NodeNames:
        return nodeset_nodes(job.spec.get("nodeset"), named, choice) if nodes else ()

    def node_choices(job: JobInfo) -> int:
        return len(nodeset_alternatives(job.spec.get("nodeset"), named)) if nodes else 1

    def groups_for(job: JobInfo, choice: int) -> dict[str, tuple[str, ...]]:
        return nodeset_groups(job.spec.get("nodeset"), named, choice) if nodes else {}

    def queue_for(project: str, branch: str) -> tuple[str, bool] | None:
        return layout.queue_for(project, branch, config.name)

    def allows_cycles(project: str, branch: str) -> bool:
        found = queue_for(project, branch)
        queue = layout.queues.get(found[0]) if found else None
        return bool(queue and queue.allow_circular_dependencies)

    def batch_for(project: str, branch: str) -> BatchConfig | None:
        found = queue_for(project, branch)
        queue = layout.queues.get(found[0]) if found else None
        return queue.batch if queue is not None and queue.batch is not None else config.batch

    def pending_failure_for(project: str, branch: str) -> int:
        found = queue_for(project, branch)
        queue = layout.queues.get(found[0]) if found else None
        if queue is not None and queue.pending_failure_depth is not None:
            return queue.pending_failure_depth
        return config.pending_failure_depth

    return PipelineSettings(
        name=config.name,
        manager=config.manager,
        dequeue_on_new_patchset=config.dequeue_on_new_patchset,
        reporter_actions=frozenset(a for a, conns in config.reporters.items() if conns),
        disable_after=config.disable_after,
        merge_when_disabled=merges_on_success(config, "disabled"),
        window=window_settings(config.window),
        queue_for=queue_for,
        merge_on_success=merges_on_success(config),
        allows_cycles=allows_cycles,
        nodes_for=nodes_for,
        node_choices=node_choices,
        groups_for=groups_for,
        node_priority=NODE_PRIORITIES.get(config.precedence, 200),
        batch_for=batch_for,
        pending_failure_for=pending_failure_for,
        failure_verdict=config.failure_verdict,
    )


class LayoutManagerSource:
    """Managers for pipelines under each tenant's current layout (a ``ManagerSource``)."""

    def __init__(
        self,
        layouts: TenantLayouts | None = None,
        global_semaphores: frozenset[str] = frozenset(),
        nodes: bool = False,
    ) -> None:
        self.layouts = layouts
        self.global_semaphores = global_semaphores
        # node providers are configured: nodesets become node requests
        self.nodes = nodes

    def _layouts(self, client: ZooKeeperClient) -> TenantLayouts:
        if self.layouts is None or self.layouts.client is not client:
            self.layouts = TenantLayouts(client)
        return self.layouts

    def open(
        self, client: ZooKeeperClient, tenant: str, pipeline: str
    ) -> tuple[PipelineManager, TxnLedger]:
        layout = self._layouts(client).get(tenant)
        config = layout.layout.pipelines.get(pipeline)
        global_names = self.global_semaphores | frozenset(layout.tenant.global_semaphores)
        if config is None:
            # Not (or no longer) in the layout: its items are dequeued and reported.
            ledger = TxnLedger(client, tenant, {}, global_names, pipeline)
            return RetiringManager(PipelineSettings(pipeline), NoLayout(), ledger), ledger
        try:
            kind = manager_class(config.manager)
        except ValueError:
            raise UnsupportedManagerError(
                f"pipeline {pipeline!r} of tenant {tenant!r}: manager {config.manager!r} "
                "is not implemented in this Sluice yet"
            ) from None
        settings = pipeline_settings(layout.layout, config, self.nodes)
        maxima = {name: sem.max for name, sem in layout.layout.semaphores.items()}
        # A global semaphore the tenant lists wins over a tenant one of the same name.
        maxima.update(layout.tenant.global_semaphores)
        fence = (paths.layout_state(tenant), layout.state.version)
        ledger = TxnLedger(client, tenant, maxima, global_names, pipeline, fence)
        return kind(settings, LayoutFreezer(layout, pipeline), ledger), ledger
