"""The pipeline counters (resets, waste, dequeues, time in queue) commit with their pass.

A gate of three where the first fails, through the processing layer and a
real ZooKeeper (the test plays the workers). A pass that crashes before it
commits counted nothing, and a report repeated after a crash before the
second commit is counted once.
"""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import generate_latest

from scheduler import metrics
from scheduler.model import reasons
from scheduler.model.results import Result
from scheduler.model.tally import PipelineTotals
from scheduler.processing.pipeline import PipelinePass
from scheduler.stores import pipeline_stats
from scheduler.stores.job_requests import ClaimedRequest
from tests.scheduler.test_manager_dependent_zk import gate  # noqa: F401
from tests.scheduler.world import PIPELINE, TENANT, World


class CrashError(Exception):
    pass


def totals(world: World) -> PipelineTotals:
    return pipeline_stats.read(world.client, TENANT, PIPELINE)[0]


def three_running(gate: World) -> dict[str, ClaimedRequest]:  # noqa: F811
    """A, B and C merged and their builds started (claimed by the test): by ref."""
    for ref in "ABC":
        gate.enqueue(ref)
    gate.process()
    gate.run(gate.merger, {"ok": True})
    gate.process()
    by_buildset = {i.buildset.uuid: i.change.ref for i in gate.state().items.values()}
    claimed = {}
    for request in gate.executor.pending():
        found = gate.executor.claim(request.uuid, "test-worker")
        assert found is not None
        claimed[by_buildset[request.buildset_uuid]] = found
    gate.process()  # the builds started
    return claimed


def fail_a(gate: World, claimed: dict[str, ClaimedRequest]) -> None:  # noqa: F811
    assert gate.executor.complete(claimed["A"], {"result": "FAILURE", "data": {}})


def test_the_failure_is_counted_with_the_pass_that_decided_it(gate: World) -> None:  # noqa: F811
    claimed = three_running(gate)
    assert totals(gate) == PipelineTotals()
    fail_a(gate, claimed)
    gate.process()
    assert [(i.change.ref, i.result) for i in gate.reports.items] == [("A", Result.FAILURE)]
    found = totals(gate)
    assert found.resets["app"].resets == 2 and found.resets["app"].builds == 2
    assert found.resets["app"].ci_seconds >= 0
    assert found.dequeues == {reasons.FAILED: 1}
    assert found.time_in_queue["app"].count == 1
    # the items behind carry the cost in their documents, the failure its total
    by_ref = {i.change.ref: i for i in gate.state().items.values()}
    assert by_ref["B"].resets.total.resets == 1
    assert by_ref["B"].resets.cause is not None and by_ref["B"].resets.cause.ref == "A"
    reported = gate.reports.items[0]
    assert reported.reason is not None and reported.reason.jobs == ("unit",)
    assert reported.reset_cost.resets == 2


def test_a_pass_that_crashes_before_its_commit_counts_nothing(
    gate: World,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fail_a(gate, three_running(gate))
    original = PipelinePass.commit

    def crash(self: PipelinePass, *args: Any) -> Any:
        raise CrashError

    monkeypatch.setattr(PipelinePass, "commit", crash)
    with pytest.raises(CrashError):
        gate.process()
    assert totals(gate) == PipelineTotals()
    monkeypatch.setattr(PipelinePass, "commit", original)
    gate.process()
    found = totals(gate)
    assert found.resets["app"].resets == 2
    assert found.dequeues == {reasons.FAILED: 1}


def test_a_report_repeated_after_a_crash_is_counted_once(
    gate: World,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fail_a(gate, three_running(gate))
    original = PipelinePass.report

    def report_then_crash(self: PipelinePass, manager: Any, *args: Any) -> Any:
        self._report(manager, args[-1], manager.intents.reports)
        raise CrashError

    monkeypatch.setattr(PipelinePass, "report", report_then_crash)
    with pytest.raises(CrashError):
        gate.process()
    found = totals(gate)
    assert found.resets["app"].resets == 2  # committed by the first commit
    assert found.dequeues == {}  # A has not left yet
    monkeypatch.setattr(PipelinePass, "report", original)
    gate.process()
    assert [(i.change.ref, i.result) for i in gate.reports.items] == [
        ("A", Result.FAILURE),
        ("A", Result.FAILURE),
    ]
    found = totals(gate)
    assert found.resets["app"].resets == 2
    assert found.dequeues == {reasons.FAILED: 1}
    assert found.time_in_queue["app"].count == 1


def test_the_counters_are_scraped_as_prometheus_metrics(gate: World) -> None:  # noqa: F811
    fail_a(gate, three_running(gate))
    gate.process()
    text = generate_latest(metrics.registry(gate.client)).decode()
    labels = f'pipeline="{PIPELINE}",queue="app",tenant="{TENANT}"'
    assert f"sluice_queue_resets_total{{{labels}}} 2.0" in text
    assert f"sluice_builds_wasted_total{{{labels}}} 2.0" in text
    assert f"sluice_ci_seconds_wasted_total{{{labels}}}" in text
    assert (
        f'sluice_dequeues_total{{pipeline="{PIPELINE}",reason="failed",tenant="{TENANT}"}} 1.0'
        in text
    )
    assert f'sluice_time_in_queue_seconds_bucket{{le="+Inf",{labels}}} 1.0' in text
    assert f"sluice_time_in_queue_seconds_count{{{labels}}} 1.0" in text
