"""Task labels: what a task is about, in words, for Flower and logs."""

from __future__ import annotations

import pytest

from scheduler.nudge import task_labels, task_names
from scheduler.stores.job_requests import JobRequest


def test_a_build_says_tenant_pipeline_project_change_job_and_attempt() -> None:
    request = JobRequest(
        uuid="0123456789abcdef0123",
        tenant="demo",
        pipeline="gate",
        job_name="unit",
        info={"project": "app", "change": "refs/changes/1", "attempt": 2, "zone": "east"},
    )
    assert task_labels.request_label(request) == (
        "tenant=demo pipeline=gate project=app change=refs/changes/1 job=unit attempt=2 "
        "zone=east request=0123456789abcdef0123"
    )


def test_a_merge_says_its_kind() -> None:
    request = JobRequest(
        uuid="feedfacefeedface",
        tenant="demo",
        pipeline="check",
        job_name="feedface",
        info={"kind": "merge", "project": "app", "change": "feature"},
    )
    assert task_labels.request_label(request) == (
        "merge=merge tenant=demo pipeline=check project=app change=feature request=feedfacefeedface"
    )


def test_labels_from_arguments_alone() -> None:
    assert task_labels.label(task_names.PROCESS_PIPELINE, ["demo", "check"]) == (
        "tenant=demo pipeline=check"
    )
    assert task_labels.label(task_names.PROCESS_TENANT, ["demo"]) == "tenant=demo"
    assert task_labels.label(task_names.BUILD, ["abc", None]) == "request=abc"
    assert task_labels.label(task_names.BUILD, ["abc", "east"]) == "request=abc zone=east"
    assert task_labels.label("sluice.maintenance.sweep", []) == ""


def test_an_outcome_in_the_same_words() -> None:
    assert task_labels.outcome_label("completed", "job=unit", "SUCCESS") == (
        "completed SUCCESS: job=unit"
    )
    assert task_labels.outcome_label("duplicate", "") == "duplicate"


def test_a_label_names_the_arguments_to_send_again() -> None:
    build = JobRequest(uuid="u1", tenant="t", pipeline="p", job_name="j", info={"zone": "z"})
    assert task_labels.arguments(task_names.BUILD, task_labels.request_label(build)) == (
        ["u1"],
        {"zone": "z"},
    )
    for name, args in [
        (task_names.PROCESS_PIPELINE, ["demo", "check"]),
        (task_names.PROCESS_TENANT, ["demo"]),
        (task_names.MERGE, ["u2"]),
        (task_names.FORWARD_CONNECTION_EVENTS, ["git"]),
        (task_names.IMAGE_BUILD, ["ubuntu"]),
    ]:
        assert task_labels.arguments(name, task_labels.label(name, args)) == (args, {})


def test_a_label_without_its_identifiers_is_an_error() -> None:
    with pytest.raises(task_labels.LabelError, match="names no pipeline"):
        task_labels.arguments(task_names.PROCESS_PIPELINE, "tenant=demo")
    with pytest.raises(task_labels.LabelError, match="not a task Sluice"):
        task_labels.arguments("celery.backend_cleanup", "")
