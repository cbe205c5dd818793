"""Task labels: what a task is about, in words, for Flower and logs."""

from __future__ import annotations

import pytest

from scheduler import tasklabels, tasknames
from scheduler.zk.job_requests import JobRequest


def test_a_build_says_tenant_pipeline_project_change_job_and_attempt() -> None:
    request = JobRequest(
        uuid="0123456789abcdef0123",
        tenant="demo",
        pipeline="gate",
        job_name="unit",
        info={"project": "app", "change": "refs/changes/1", "attempt": 2, "zone": "east"},
    )
    assert tasklabels.request_label(request) == (
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
    assert tasklabels.request_label(request) == (
        "merge=merge tenant=demo pipeline=check project=app change=feature request=feedfacefeedface"
    )


def test_labels_from_arguments_alone() -> None:
    assert tasklabels.label(tasknames.PROCESS_PIPELINE, ["demo", "check"]) == (
        "tenant=demo pipeline=check"
    )
    assert tasklabels.label(tasknames.PROCESS_TENANT, ["demo"]) == "tenant=demo"
    assert tasklabels.label(tasknames.BUILD, ["abc", None]) == "request=abc"
    assert tasklabels.label(tasknames.BUILD, ["abc", "east"]) == "request=abc zone=east"
    assert tasklabels.label("sluice.maintenance.sweep", []) == ""


def test_an_outcome_in_the_same_words() -> None:
    assert tasklabels.outcome_label("completed", "job=unit", "SUCCESS") == (
        "completed SUCCESS: job=unit"
    )
    assert tasklabels.outcome_label("duplicate", "") == "duplicate"


def test_a_label_names_the_arguments_to_send_again() -> None:
    build = JobRequest(uuid="u1", tenant="t", pipeline="p", job_name="j", info={"zone": "z"})
    assert tasklabels.arguments(tasknames.BUILD, tasklabels.request_label(build)) == (
        ["u1"],
        {"zone": "z"},
    )
    for name, args in [
        (tasknames.PROCESS_PIPELINE, ["demo", "check"]),
        (tasknames.PROCESS_TENANT, ["demo"]),
        (tasknames.MERGE, ["u2"]),
        (tasknames.FORWARD_CONNECTION_EVENTS, ["git"]),
        (tasknames.IMAGE_BUILD, ["ubuntu"]),
    ]:
        assert tasklabels.arguments(name, tasklabels.label(name, args)) == (args, {})


def test_a_label_without_its_identifiers_is_an_error() -> None:
    with pytest.raises(tasklabels.LabelError, match="names no pipeline"):
        tasklabels.arguments(tasknames.PROCESS_PIPELINE, "tenant=demo")
    with pytest.raises(tasklabels.LabelError, match="not a task Sluice"):
        tasklabels.arguments("celery.backend_cleanup", "")
