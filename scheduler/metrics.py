"""Prometheus metrics, read from the truth at scrape time.

Work runs in many Celery worker processes, so nothing is counted in a
process: a scrape reads ZooKeeper (queues, items, requests, semaphores,
components) and the SQL history (builds and buildsets by result, build
durations). Names follow Zuul's vocabulary (``current_changes``,
``resident_time``, builds by result) in Prometheus style; each metric is
described in ``docs/operations.md``.

:func:`registry` gives a ``CollectorRegistry`` with the collector; ``sluice
metrics`` serves it, and the web process (``web/``) mounts :func:`wsgi_app`
at ``/metrics``.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from scheduler.model.tally import QUEUE_BUCKETS
from scheduler.state.store import PipelineStore
from scheduler.stores import inventory, pipeline_stats, timings
from scheduler.stores.components import all_components
from scheduler.stores.job_requests import JobRequestQueue
from scheduler.stores.semaphores import SemaphoreNode
from scheduler.sweep import sweep_totals
from scheduler.zk import paths
from scheduler.zk.client import ZooKeeperClient
from scheduler.zk.context import LockContext
from scheduler.zk.event_queue import EventQueue

log = logging.getLogger(__name__)

# Build durations are summarised over this many of the latest finished builds.
DURATION_SAMPLES = 1000
DURATION_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200)


class SluiceCollector(Collector):
    """Reads ZooKeeper and SQL on every ``collect()``."""

    def __init__(self, client: ZooKeeperClient, engine: Any = None) -> None:
        self.client = client
        self.engine = engine

    def collect(self) -> Iterator[Metric]:
        started = time.monotonic()
        parts = (
            self._pipelines,
            self._pipeline_totals,
            self._event_queues,
            self._requests,
            self._registry,
            self._timings,
        )
        for part in parts:
            yield from self._safely(part)
        if self.engine is not None:
            yield from self._safely(self._history)
        took = GaugeMetricFamily(
            "sluice_scrape_seconds", "How long reading this scrape from ZooKeeper and SQL took."
        )
        took.add_metric([], time.monotonic() - started)
        yield took

    def _safely(self, part: Callable[[], Iterator[Metric]]) -> Iterator[Metric]:
        try:
            yield from list(part())
        except Exception:
            log.warning("metrics: %s could not be read", part.__name__, exc_info=True)

    def _pipelines(self) -> Iterator[Metric]:
        items = GaugeMetricFamily(
            "sluice_pipeline_items",
            "Items in a pipeline's queue (Zuul: current_changes).",
            labels=["tenant", "pipeline", "queue"],
        )
        resident = GaugeMetricFamily(
            "sluice_pipeline_resident_seconds_max",
            "Seconds the oldest item of a pipeline has been in it (Zuul: resident_time).",
            labels=["tenant", "pipeline"],
        )
        store = PipelineStore(self.client)
        now = time.time()
        for tenant in inventory.tenants(self.client):
            for pipeline in inventory.pipelines(self.client, tenant):
                state = store.state(tenant, pipeline, store.read(tenant, pipeline))
                for queue in state.queues.values():
                    count = sum(1 for u in queue.items if u in state.items)
                    items.add_metric([tenant, pipeline, queue.name], count)
                times = [i.enqueue_time for i in state.items.peek_values() if i.enqueue_time]
                resident.add_metric([tenant, pipeline], now - min(times) if times else 0.0)
        yield items
        yield resident

    def _pipeline_totals(self) -> Iterator[Metric]:
        """The counters the pipeline passes commit (``scheduler/stores/pipeline_stats.py``)."""
        queue_labels = ["tenant", "pipeline", "queue"]
        resets = CounterMetricFamily(
            "sluice_queue_resets",
            "Items of a queue reset (retested) because an item ahead failed or left.",
            labels=queue_labels,
        )
        builds = CounterMetricFamily(
            "sluice_builds_wasted",
            "Builds (running or finished) thrown away by resets.",
            labels=queue_labels,
        )
        seconds = CounterMetricFamily(
            "sluice_ci_seconds_wasted",
            "CI seconds of the builds thrown away by resets (end or reset time minus start).",
            labels=queue_labels,
        )
        dequeues = CounterMetricFamily(
            "sluice_dequeues",
            "Items that left a pipeline without success, by reason.",
            labels=["tenant", "pipeline", "reason"],
        )
        in_queue = HistogramMetricFamily(
            "sluice_time_in_queue_seconds",
            "From an item's enqueue to its leaving the pipeline (its report).",
            labels=queue_labels,
        )
        batches = CounterMetricFamily(
            "sluice_batches",
            "Batches of a queue tested (one buildset for several changes).",
            labels=queue_labels,
        )
        batch_changes = CounterMetricFamily(
            "sluice_batch_changes",
            "Changes in the batches tested (over sluice_batches_total: the mean batch size).",
            labels=queue_labels,
        )
        bisections = CounterMetricFamily(
            "sluice_bisections",
            "Failed batches split in halves (or one by one past max-bisect-depth).",
            labels=queue_labels,
        )
        for (tenant, pipeline), found in pipeline_stats.read_all(self.client).items():
            for queue, counted in sorted(found.batches.items()):
                batches.add_metric([tenant, pipeline, queue], counted.tested)
                batch_changes.add_metric([tenant, pipeline, queue], counted.changes)
                bisections.add_metric([tenant, pipeline, queue], counted.bisections)
            for queue, waste in sorted(found.resets.items()):
                resets.add_metric([tenant, pipeline, queue], waste.resets)
                builds.add_metric([tenant, pipeline, queue], waste.builds)
                seconds.add_metric([tenant, pipeline, queue], waste.ci_seconds)
            for kind, count in sorted(found.dequeues.items()):
                dequeues.add_metric([tenant, pipeline, kind], count)
            for queue, histogram in sorted(found.time_in_queue.items()):
                buckets = [
                    (str(bound), count)
                    for bound, count in zip(QUEUE_BUCKETS, histogram.buckets, strict=True)
                ] + [("+Inf", histogram.count)]
                in_queue.add_metric([tenant, pipeline, queue], buckets, histogram.total)
        yield from (resets, builds, seconds, dequeues, in_queue)
        yield from (batches, batch_changes, bisections)

    def _event_queues(self) -> Iterator[Metric]:
        length = GaugeMetricFamily(
            "sluice_event_queue_length",
            "Events waiting in a ZooKeeper event queue.",
            labels=["queue", "tenant", "pipeline", "connection"],
        )

        def add(kind: str, root: str, tenant: str = "", pipeline: str = "", conn: str = "") -> None:
            events = EventQueue(self.client, root).length()
            length.add_metric([kind, tenant, pipeline, conn], events)

        for connection in inventory.connections(self.client):
            add("connection", paths.connection_event_queue(connection), conn=connection)
        for tenant in inventory.tenants(self.client):
            add("tenant-management", paths.tenant_management_queue(tenant), tenant)
            add("tenant-trigger", paths.tenant_trigger_queue(tenant), tenant)
            add("tenant-reconfigure", paths.tenant_reconfigure_queue(tenant), tenant)
            for pipeline in inventory.pipelines(self.client, tenant):
                for kind, root in (
                    ("pipeline-management", paths.pipeline_management_queue(tenant, pipeline)),
                    ("pipeline-trigger", paths.pipeline_trigger_queue(tenant, pipeline)),
                    ("pipeline-result", paths.pipeline_result_queue(tenant, pipeline)),
                ):
                    add(kind, root, tenant, pipeline)
        yield length

    def _requests(self) -> Iterator[Metric]:
        requests = GaugeMetricFamily(
            "sluice_requests",
            "Merge and build requests in ZooKeeper, by queue and state.",
            labels=["queue", "state"],
        )
        roots = {"merger": paths.merger_queue(), "executor": paths.executor_queue()}
        for zone in inventory.executor_zones(self.client):
            roots[f"executor.{zone}"] = paths.executor_queue(zone)
        for name, root in roots.items():
            states = Counter(JobRequestQueue(self.client, root).state_counts())
            for state in ("requested", "running", "paused", "completed"):
                requests.add_metric([name, state], states.get(state.upper(), 0))
        yield requests

    def _registry(self) -> Iterator[Metric]:
        holders = GaugeMetricFamily(
            "sluice_semaphore_holders", "Builds holding a semaphore.", labels=["semaphore"]
        )
        for path in inventory.semaphores(self.client):
            holders.add_metric([path], len(SemaphoreNode(self.client, path).holders()))
        yield holders
        components = GaugeMetricFamily(
            "sluice_components", "Registered worker processes, by kind.", labels=["kind"]
        )
        kinds = Counter(c.kind for c in all_components(self.client))
        for kind in paths.COMPONENT_KINDS:
            components.add_metric([kind], kinds.get(kind, 0))
        yield components
        recoveries = CounterMetricFamily(
            "sluice_sweep_recoveries",
            "Lost requests the sweep completed as LOST, by queue.",
            labels=["queue"],
        )
        renudges = CounterMetricFamily(
            "sluice_sweep_renudges",
            "Pending requests whose nudge the sweep sent again, by queue.",
            labels=["queue"],
        )
        for step, count in sweep_totals(LockContext(self.client)).items():
            queue, _, what = step.rpartition(":")
            family = recoveries if what == "lost" else renudges
            family.add_metric([queue], count)
        yield recoveries
        yield renudges

    def _timings(self) -> Iterator[Metric]:
        described = {
            timings.EVENT_PROCESSING: (
                "sluice_event_processing_seconds",
                "How long events waited in ZooKeeper before a pipeline pass applied them.",
            ),
            timings.MERGE: (
                "sluice_merge_duration_seconds",
                "From a merger request (merge, push, config fetch) to its result.",
            ),
        }
        for name, (metric, text) in described.items():
            found = timings.read(self.client, name)
            buckets = [
                (str(bound), count)
                for bound, count in zip(timings.BUCKETS, found.buckets, strict=True)
            ] + [("+Inf", found.count)]
            yield HistogramMetricFamily(metric, text, buckets=buckets, sum_value=found.total)

    def _history(self) -> Iterator[Metric]:
        from scheduler.reporting.queries import build_durations, count_by_result

        builds = CounterMetricFamily(
            "sluice_builds", "Finished build attempts, by result (SQL history).", labels=["result"]
        )
        for result, count in count_by_result(self.engine, buildsets=False).items():
            builds.add_metric([result], count)
        yield builds
        buildsets = CounterMetricFamily(
            "sluice_buildsets", "Reported buildsets, by result (SQL history).", labels=["result"]
        )
        for result, count in count_by_result(self.engine, buildsets=True).items():
            buildsets.add_metric([result], count)
        yield buildsets
        durations = build_durations(self.engine, DURATION_SAMPLES)
        buckets = [(str(b), sum(1 for d in durations if d <= b)) for b in DURATION_BUCKETS] + [
            ("+Inf", len(durations))
        ]
        histogram = HistogramMetricFamily(
            "sluice_build_duration_seconds",
            f"Durations of the latest {DURATION_SAMPLES} finished builds (SQL history).",
            buckets=buckets,
            sum_value=sum(durations),
        )
        yield histogram


def registry(client: ZooKeeperClient, engine: Any = None) -> CollectorRegistry:
    """A registry holding only Sluice's collector."""
    found = CollectorRegistry(auto_describe=False)
    found.register(SluiceCollector(client, engine))
    return found


def wsgi_app(client: ZooKeeperClient, engine: Any = None) -> Callable[..., Any]:
    """The ``/metrics`` endpoint as a WSGI application."""
    app: Callable[..., Any] = make_wsgi_app(registry(client, engine))
    return app
