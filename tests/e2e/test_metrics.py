"""Prometheus metrics scraped from ``sluice metrics`` while a change goes through check."""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from cli.stack.process import free_port
from tests.e2e.system import SluiceSystem
from tests.e2e.test_check_pipeline import prepare_check
from tests.fixtures.waiting import wait_until

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


@pytest.fixture
def exporter(system: SluiceSystem, tmp_path: Path) -> Iterator[str]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLUICE_")}
    env.update(system.env())
    log = (tmp_path / "metrics.log").open("w")
    sluice = str(Path(sys.executable).parent / "sluice")
    proc = subprocess.Popen(
        [sluice, "metrics", "--port", str(port)], env=env, stdout=log, stderr=subprocess.STDOUT
    )
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        wait_until(lambda: bool(_scrape(url)), 30, "the exporter answering", interval=0.2)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        log.close()


def _scrape(url: str) -> Samples:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            text = response.read().decode()
    except OSError:
        return {}
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def _value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))


def test_metrics_during_a_run(system: SluiceSystem, exporter: str) -> None:
    prepare_check(system)
    system.start_worker(("scheduler",))
    system.start_worker(("merger", "maintenance"))
    system.sluice("reconfigure")
    system.enqueue("feature")  # no executor yet: the item stays, its builds wait

    def item_counted() -> bool:
        samples = _scrape(exporter)
        queued = _value(samples, "sluice_requests", queue="executor", state="requested")
        items = [v for (n, _), v in samples.items() if n == "sluice_pipeline_items"]
        return sum(items) == 1 and bool(queued)

    wait_until(item_counted, 60, "the item and its build requests in the metrics")
    during = _scrape(exporter)
    assert _value(during, "sluice_components", kind="scheduler") == 1
    assert _value(during, "sluice_components", kind="worker") == 1
    assert (
        _value(during, "sluice_pipeline_resident_seconds_max", tenant="demo", pipeline="check") or 0
    ) > 0
    queues = {dict(labels)["queue"] for (n, labels) in during if n == "sluice_event_queue_length"}
    assert {
        "tenant-management",
        "tenant-trigger",
        "pipeline-management",
        "pipeline-result",
    } <= queues

    system.start_worker(("executor",))
    system.sluice("wait", "--idle", "--timeout", "90")
    after = _scrape(exporter)
    assert _value(after, "sluice_builds_total", result="SUCCESS") == 2
    assert _value(after, "sluice_builds_total", result="FAILURE") == 1
    assert _value(after, "sluice_buildsets_total", result="SUCCESS") == 1
    assert _value(after, "sluice_build_duration_seconds_count") == 3
    items = [v for (n, _), v in after.items() if n == "sluice_pipeline_items"]
    assert sum(items) == 0

    # events applied by pipeline passes and merges, timed by the processes that
    # did them (each process writes its timings at most every 2 s: wait for it)
    def timed() -> Samples:
        samples = _scrape(exporter)
        counted = (_value(samples, "sluice_event_processing_seconds_count") or 0) >= 3
        merged = (_value(samples, "sluice_merge_duration_seconds_count") or 0) >= 1
        return samples if counted and merged else {}

    after = wait_until(timed, 30, "the workers' timings written")
    assert (_value(after, "sluice_event_processing_seconds_sum") or 0) > 0
    assert (_value(after, "sluice_merge_duration_seconds_count") or 0) >= 1
    assert _value(after, "sluice_merge_duration_seconds_bucket", le="+Inf") == _value(
        after, "sluice_merge_duration_seconds_count"
    )
