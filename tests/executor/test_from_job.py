"""A frozen job of the scheduler becomes a build spec, and runs."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from scheduler.config.freeze import FrozenJob
from scheduler.config.model import Playbook, RequiredProject
from scheduler.wire.build_from_job import spec_for_job
from tests.executor.helpers import Repo
from workers.executor import (
    BaseControl,
    BuildSpec,
    BuildSpecError,
    JobStep,
    Result,
    RunnerOptions,
    run_build,
)


def frozen(**changes: object) -> FrozenJob:
    values: dict[str, object] = {
        "name": "unit",
        "project": "org/app",
        "branch": "main",
        "pipeline": "check",
        "timeout": 30,
        "run": (Playbook("ci/run.sh", "org/app", "main", False),),
        "post_run": (Playbook("ci/logs.sh", "org/config", "main", True),),
        "vars": {"level": 1},
        "required_projects": (RequiredProject("org/lib", override_checkout="stable"),),
    }
    values.update(changes)
    return FrozenJob(**values)  # type: ignore[arg-type]


COMMITS = {
    "org/app": {"main": "a" * 40},
    "org/config": {"main": "c" * 40},
    "org/lib": {"main": "b" * 40, "stable": "d" * 40},
    "org/unrelated": {"main": "e" * 40},
}
SOURCES = {name: f"/cache/{name}" for name in COMMITS}


def test_spec_for_job_maps_every_field() -> None:
    spec = spec_for_job(
        frozen(),
        tenant="t",
        ref="refs/changes/1",
        build_uuid="b1",
        repo_state=COMMITS,
        sources=SOURCES,
        parent_data={"x": 1},
    )

    assert (spec.tenant, spec.pipeline, spec.project, spec.branch, spec.job) == (
        "t",
        "check",
        "org/app",
        "main",
        "unit",
    )
    assert spec.run == (JobStep("ci/run.sh", "org/app", "main"),)
    assert spec.post_run == (JobStep("ci/logs.sh", "org/config", "main", trusted=True),)
    assert spec.timeout == 30.0
    assert spec.post_timeout is None
    assert spec.vars == {"level": 1}
    assert spec.parent_data == {"x": 1}
    assert set(spec.repo_state) == {"org/app", "org/config", "org/lib"}
    assert spec.checkouts == {"org/lib": "stable"}
    assert BuildSpec.from_json(spec.to_json()) == spec


def test_spec_for_job_names_missing_projects() -> None:
    with pytest.raises(BuildSpecError, match="repo state lacks org/config, org/lib"):
        spec_for_job(
            frozen(),
            tenant="t",
            ref="",
            build_uuid="b1",
            repo_state={"org/app": COMMITS["org/app"]},
            sources=SOURCES,
        )


def test_frozen_job_runs(repo: Repo, options: RunnerOptions) -> None:
    repo.script("ci/run.sh", 'echo "ran $SLUICE_JOB"')
    commit = repo.commit()
    job = frozen(
        project="org/project",
        run=(Playbook("ci/run.sh", "org/project", "main", False),),
        post_run=(),
        required_projects=(),
    )
    spec = spec_for_job(
        job,
        tenant="t",
        ref="",
        build_uuid=uuid.uuid4().hex,
        repo_state={"org/project": {"main": commit}},
        sources={"org/project": str(repo.path)},
    )

    result = run_build(spec, BaseControl(), options)

    assert result.result is Result.SUCCESS, result.message
    assert any(line.endswith("| run | ran unit") for line in result.log_tail)
    assert Path(result.log_path).is_file()
