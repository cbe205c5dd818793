"""What a frozen job and its build's context make together (workers/executor/job.py), and a run."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from scheduler.config.freeze import FrozenJob
from scheduler.config.model import Playbook, RequiredProject
from tests.executor.helpers import Repo
from workers.executor import (
    BaseControl,
    BuildContext,
    BuildSpec,
    BuildSpecError,
    Phase,
    Result,
    RunnerOptions,
    run_build,
)
from workers.executor.job import Step, check, checkouts, steps

CONFIG_HEAD = "c" * 40
CONFIG_BEFORE = "f" * 40


def frozen(**changes: object) -> FrozenJob:
    values: dict[str, object] = {
        "name": "unit",
        "project": "org/app",
        "branch": "main",
        "pipeline": "check",
        "timeout": 30,
        "pre_run": (Playbook("ci/pre.sh", "org/config", "main", True),),
        "run": (Playbook("ci/run.sh", "org/app", "main", False, (("site", "k"),)),),
        "post_run": (Playbook("ci/logs.sh", "org/config", "stable", True),),
        "vars": {"level": 1},
        "required_projects": (
            RequiredProject("org/lib", override_checkout="stable"),
            RequiredProject("org/tools"),
        ),
        "secrets": {"k": {"connection": "git", "project": "org/app", "name": "s", "data": {}}},
    }
    values.update(changes)
    return FrozenJob(**values)  # type: ignore[arg-type]


COMMITS = {
    "org/app": {"main": "a" * 40},
    "org/config": {"main": CONFIG_HEAD, "stable": "e" * 40},
    "org/lib": {"main": "b" * 40, "stable": "d" * 40},
    "org/tools": {"main": "9" * 40},
}


def spec_of(job: FrozenJob, **changes: object) -> BuildSpec:
    values: dict[str, object] = {
        "tenant": "t",
        "build_uuid": "b1",
        "repo_state": COMMITS,
        "sources": {name: f"/cache/{name}" for name in COMMITS},
        # the item's merge moved config's main: trusted steps there run from before it
        "base_state": {"org/config": {"main": CONFIG_BEFORE}, "org/app": {"main": "8" * 40}},
    }
    values.update(changes)
    return BuildSpec(job, BuildContext(**values))  # type: ignore[arg-type]


def test_steps_are_the_playbooks_a_trusted_one_at_its_commit_before_the_merge() -> None:
    spec = spec_of(frozen())

    pre = Step("ci/pre.sh", "org/config", "main", CONFIG_BEFORE, trusted=True)
    assert steps(spec, Phase.PRE_RUN) == (pre,)
    # untrusted: from the repo state, even where the merge moved its branch
    run = Step("ci/run.sh", "org/app", "main", None, (("site", "k"),))
    assert steps(spec, Phase.RUN) == (run,)
    # trusted, its branch not moved by the merge
    post = Step("ci/logs.sh", "org/config", "stable", None, trusted=True)
    assert steps(spec, Phase.POST_RUN) == (post,)
    assert run.protected and not run.trusted
    assert steps(spec, Phase.PRE_RUN)[0].protected


def test_checkouts_are_the_override_checkouts_of_required_projects() -> None:
    assert checkouts(spec_of(frozen())) == {"org/lib": "stable"}


def test_check_passes_a_complete_build() -> None:
    check(spec_of(frozen()))


@pytest.mark.parametrize(
    ("job", "repo_state", "message"),
    [
        (frozen(), {"org/app": COMMITS["org/app"]}, "repo state lacks org/config, org/lib"),
        (frozen(secrets={}), COMMITS, "run ci/run.sh: no secret 'k'"),
        (frozen(timeout=0), COMMITS, "job unit: timeout must be a positive number, got 0"),
        (frozen(post_timeout="1h"), COMMITS, "post-timeout must be a positive number"),
        (frozen(vars=[1]), COMMITS, "job unit: vars must be an object"),
    ],
)
def test_check_names_what_cannot_run(
    job: FrozenJob, repo_state: dict[str, dict[str, str]], message: str
) -> None:
    spec = spec_of(job, repo_state=repo_state, sources={p: "/x" for p in repo_state})
    with pytest.raises(BuildSpecError, match=message):
        check(spec)


def test_a_build_that_cannot_run_is_error_before_anything_runs(
    repo: Repo, options: RunnerOptions
) -> None:
    spec = spec_of(frozen(), repo_state={"org/app": COMMITS["org/app"]}, sources={"org/app": "/x"})

    result = run_build(spec, BaseControl(), options)

    assert result.result is Result.ERROR
    assert result.message == "job unit: repo state lacks org/config, org/lib, org/tools"
    assert result.steps == ()


def test_frozen_job_runs(repo: Repo, options: RunnerOptions) -> None:
    repo.script("ci/run.sh", 'echo "ran $SLUICE_JOB"')
    commit = repo.commit()
    job = frozen(
        project="org/project",
        pre_run=(),
        run=(Playbook("ci/run.sh", "org/project", "main", False),),
        post_run=(),
        required_projects=(),
        secrets={},
    )
    context = BuildContext(
        tenant="t",
        build_uuid=uuid.uuid4().hex,
        repo_state={"org/project": {"main": commit}},
        sources={"org/project": str(repo.path)},
    )

    result = run_build(BuildSpec(job, context), BaseControl(), options)

    assert result.result is Result.SUCCESS, result.message
    assert any(line.endswith("| run | ran unit") for line in result.log_tail)
    assert Path(result.log_path).is_file()
