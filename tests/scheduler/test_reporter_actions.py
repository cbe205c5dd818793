"""Zuul's reporter actions: parsing, which action a report is, the disabled state, the texts.

The pipeline keys (every action, ``merge-failure`` as Zuul's older name,
``disable-after-consecutive-failures``) and their attacks; the pure
decisions of :mod:`scheduler.manager.actions`; the state kept in the
pipeline document; the forge's texts with the ``*-message`` keys.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from scheduler.drivers.reporter import announcement, summary
from scheduler.manager import actions
from scheduler.manager.settings import PipelineSettings
from scheduler.model import reasons
from scheduler.model.item import BuildSet, PipelineState, QueueItem
from scheduler.model.results import Result
from scheduler.state import codec
from tests.config.builders import with_base
from tests.scheduler.gate_harness import Gate, change

PIPELINE = """
- pipeline:
    name: nightly
    manager: independent
    disable-after-consecutive-failures: 2
    {extra}
    trigger:
      timer:
        - time: '0 0 * * *'
"""


def parse(extra: str) -> tuple[object, list[str]]:
    result = with_base(PIPELINE.replace("{extra}", extra.replace("\n", "\n    ")))
    errors = [str(e) for e in result.errors]
    return result.layout.pipelines.get("nightly"), errors


def test_every_action_and_message_key_is_read() -> None:
    extra = "\n".join(
        f"{action}: {{github: {{status: pending}}}}" for action in actions.FINAL | {"enqueue"}
    )
    extra += "\nstart: {github: {status: pending}}\ndequeue: {github: {comment: true}}"
    extra += "\ndisabled: {github: {comment: true}}"
    extra += "\nstart-message: 'Go {pipeline.name}'\nfooter-message: See you"
    pipeline, errors = parse(extra)
    assert errors == []
    assert set(pipeline.reporters) == {  # type: ignore[attr-defined]
        *actions.FINAL,
        "enqueue",
        "start",
        "dequeue",
        "disabled",
    }
    assert pipeline.disable_after == 2  # type: ignore[attr-defined]
    assert pipeline.messages == {  # type: ignore[attr-defined]
        "start-message": "Go {pipeline.name}",
        "footer-message": "See you",
    }


def test_merge_failure_is_zuuls_older_name_of_merge_conflict() -> None:
    pipeline, errors = parse(
        "merge-failure: {github: {status: failure}}\nmerge-failure-message: Rebase it"
    )
    assert errors == []
    assert pipeline.reporters == {"merge-conflict": {"github": {"status": "failure"}}}  # type: ignore[attr-defined]
    assert pipeline.messages == {"merge-conflict-message": "Rebase it"}  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (
            "merge-failure: {github: {}}\nmerge-conflict: {github: {}}",
            "give either 'merge-conflict' or its older name 'merge-failure', not both",
        ),
        ("disabled: {nowhere: {}}", "'nowhere' is not a known connection"),
        ("disabled: {'git hub': {}}", "'git hub' is not a known connection"),
        ("disabled: [github]", "disabled"),
        ("no-jobs: 'x' ", "no-jobs"),
        ("success-message: {a: b}", "success-message"),
        ("disable-after-consecutive-failures: 0", "disable-after-consecutive-failures"),
        ("disable-after-consecutive-failures: many", "disable-after-consecutive-failures"),
        ("disable-after-consecutive-failure: 3", "disable-after-consecutive-failure"),
        ("success: {github: {review: approve}}", "'review' is not supported by Sluice yet"),
        ("success: {gitlab: {approval: true}}", "'approval' is not supported by Sluice yet"),
        ("success: {github: {colour: red}}", "unknown reporter option 'colour'"),
        ("success: {github: {label: [1]}}", "'label' must be a label name or a list of them"),
        ("failure: {gitlab: {unlabel: ''}}", "'unlabel' must be a label name or a list"),
        ("success: {github: {status: green}}", "status 'green' is not one of"),
        ("success: {github: true}", "github: expected a mapping of options, got boolean"),
    ],
)
def test_hostile_reporter_keys_are_refused_with_their_name(extra: str, expected: str) -> None:
    text = PIPELINE.replace("    disable-after-consecutive-failures: 2\n", "")
    result = with_base(text.replace("{extra}", extra.replace("\n", "\n    ")))
    assert "nightly" not in result.layout.pipelines
    assert any(expected in str(e) for e in result.errors), [str(e) for e in result.errors]


def item(result: Result | None, kind: str = "", dequeued: bool = False) -> QueueItem:
    found = QueueItem("i", change("A"), "q", BuildSet("bs"), enqueue_time=0.0)
    found.result = result
    found.dequeued = dequeued
    if kind:
        found.reason = reasons.LeaveReason(kind, "why")
    return found


@pytest.mark.parametrize(
    ("given", "configured", "expected"),
    [
        (item(Result.SUCCESS), set(), "success"),
        (item(Result.FAILURE, reasons.FAILED), set(), "failure"),
        (item(Result.MERGE_CONFLICT, reasons.MERGE_CONFLICT), set(), "failure"),
        (item(Result.MERGE_CONFLICT), {"merge-conflict"}, "merge-conflict"),
        (item(Result.CONFIG_ERROR), set(), "failure"),
        (item(Result.CONFIG_ERROR), {"config-error"}, "config-error"),
        (item(Result.DEQUEUED, reasons.SUPERSEDED, dequeued=True), set(), "dequeue"),
        (item(Result.DEQUEUED, reasons.NO_JOBS, dequeued=True), {"no-jobs"}, "no-jobs"),
        (item(Result.ERROR, reasons.DEPENDENCY_ERROR), set(), "failure"),
    ],
)
def test_the_action_of_a_report_is_zuuls(
    given: QueueItem, configured: set[str], expected: str
) -> None:
    state = PipelineState("t", "p")
    assert actions.final_action(state, given, configured) == expected


def test_failures_in_a_row_disable_the_pipeline_and_a_success_enables_it() -> None:
    state = PipelineState("t", "p")
    failed, passed = item(Result.FAILURE), item(Result.SUCCESS)
    actions.counted(state, failed, 2)
    assert (state.consecutive_failures, state.disabled) == (1, False)
    actions.counted(state, item(Result.MERGE_CONFLICT), 2)
    # the report that reached the limit was made as usual; the next ones are disabled
    assert (state.consecutive_failures, state.disabled) == (2, True)
    assert actions.final_action(state, failed, {"failure"}) == "disabled"
    assert actions.final_action(state, passed, {"success"}) == "disabled"
    dequeued = item(Result.DEQUEUED, reasons.OPERATOR, dequeued=True)
    assert actions.final_action(state, dequeued, {"dequeue"}) == ""
    assert not actions.announces(state)
    actions.counted(state, passed, 2)
    assert (state.consecutive_failures, state.disabled) == (0, False)
    assert actions.announces(state)
    # a dequeue counts neither way; without the key nothing is counted
    actions.counted(state, dequeued, 2)
    actions.counted(state, failed, None)
    assert state.consecutive_failures == 0


def test_a_disabled_gate_merges_only_if_its_disabled_reporters_merge() -> None:
    gate = PipelineSettings("gate", "dependent", merge_on_success=True)
    state = PipelineState("t", "gate")
    assert actions.settings_for(gate, state) is gate
    state.disabled = True
    assert not actions.settings_for(gate, state).merge_on_success
    merging = replace(gate, merge_when_disabled=True)
    assert actions.settings_for(merging, state).merge_on_success


def test_the_disabled_state_is_in_the_pipeline_document() -> None:
    state = PipelineState("t", "p", consecutive_failures=3, disabled=True)
    docs = codec.encode(state)
    read = codec.Reader("t", "p", docs).state()
    assert (read.consecutive_failures, read.disabled) == (3, True)
    assert "disabled" not in codec.root_doc(PipelineState("t", "p"))


def test_no_jobs_is_reported_only_where_the_pipeline_has_no_jobs_reporters() -> None:
    silent = Gate(jobs=())
    silent.enqueue("A")
    silent.merge_all()
    assert silent.reported == []
    told = Gate(jobs=(), settings=PipelineSettings("gate", reporter_actions=frozenset({"no-jobs"})))
    told.enqueue("A")
    told.merge_all()
    assert told.reported == [("A", Result.DEQUEUED)]
    reported = told.reported_items["A"]
    assert actions.item_action(reported) == "no-jobs"


def test_the_texts_use_the_message_keys_and_the_footer() -> None:
    given = item(Result.MERGE_CONFLICT, reasons.MERGE_CONFLICT)
    given.message = "conflict in a.py"
    text = summary(given, "t", "gate", {"footer-message": "-- the bot"})
    assert text.startswith("Merge Failed.\n\nThis change or one of its cross-repo")
    assert "conflict in a.py" in text and text.endswith("-- the bot")
    mine = {"merge-conflict-message": "Rebase, please.", "success-message": "Yay."}
    assert summary(given, "t", "gate", mine).startswith("Rebase, please.")
    passed = replace(given, result=Result.SUCCESS, reason=None, message="")
    assert summary(passed, "t", "g", mine) == "Yay."
    dequeued = item(Result.DEQUEUED, reasons.SUPERSEDED, dequeued=True)
    assert summary(dequeued, "t", "g").startswith("Build canceled.")
    assert summary(item(Result.FAILURE), "t", "g").startswith("Build failed (t/g).")


def test_a_start_message_names_only_known_fields() -> None:
    given = item(None)
    assert announcement("start", given, "check", {}, "http://s") == "Starting check jobs."
    hostile = {"start-message": "{pipeline.name} {status_url} {pipeline.__class__} {0} {"}
    said = announcement("start", given, "check", hostile, "http://s")
    assert said == "check http://s {pipeline.__class__} {0} {"
    assert announcement("enqueue", given, "check", {}, "") == ""
    assert announcement("enqueue", given, "check", {"enqueue-message": "Queued."}, "") == (
        "Queued."
    )
