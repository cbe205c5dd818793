"""Phases and their results with real scripts in real git repositories."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.executor.helpers import Repo, exit_codes, make_spec
from workers.executor import (
    BaseControl,
    Phase,
    Result,
    RunnerOptions,
    StartedInfo,
    StepOutcome,
    run_build,
    runner,
)


def test_success_runs_every_phase_in_order(repo: Repo, options: RunnerOptions) -> None:
    for name in ("pre.sh", "run.sh", "post.sh"):
        repo.script(f"ci/{name}", f'echo "{name} in $(pwd)" >> "$SLUICE_LOG_DIR/order"')
    commit = repo.commit()
    spec = make_spec(
        repo, commit, pre_run=("ci/pre.sh",), run=("ci/run.sh",), post_run=("ci/post.sh",)
    )

    result = run_build(spec, BaseControl(), options)

    assert result.result is Result.SUCCESS, result.message
    order = (Path(result.log_path).parent / "order").read_text().splitlines()
    project_dir = options.state_dir / "builds" / spec.context.build_uuid / "src" / "org/project"
    assert order == [f"{n} in {project_dir}" for n in ("pre.sh", "run.sh", "post.sh")]
    assert [s.phase for s in result.steps] == [Phase.PRE_RUN, Phase.RUN, Phase.POST_RUN]
    assert all(s.exit_code == 0 and s.outcome is StepOutcome.OK for s in result.steps)
    assert exit_codes(result, Phase.RUN) == [0]
    assert result.ended_at >= result.started_at
    json.dumps(result.to_dict())  # JSON-serializable as is


def test_run_failure_is_failure_and_post_run_still_runs(repo: Repo, options: RunnerOptions) -> None:
    repo.script("run.sh", "echo about to fail\nexit 3")
    repo.script("post.sh", 'echo "post saw success=$SLUICE_SUCCESS" > "$SLUICE_LOG_DIR/post"')
    spec = make_spec(repo, repo.commit(), post_run=("post.sh",))

    result = run_build(spec, BaseControl(), options)

    assert result.result is Result.FAILURE
    assert result.message == "run run.sh failed with exit code 3"
    assert exit_codes(result, Phase.RUN) == [3]
    post = Path(result.log_path).parent / "post"
    assert post.read_text().strip() == "post saw success=false"


def test_first_failing_run_step_stops_the_phase(repo: Repo, options: RunnerOptions) -> None:
    repo.script("a.sh", "exit 1")
    repo.script("b.sh", "echo never")
    spec = make_spec(repo, repo.commit(), run=("a.sh", "b.sh"))

    result = run_build(spec, BaseControl(), options)

    assert result.result is Result.FAILURE
    assert [s.path for s in result.steps] == ["a.sh"]


def test_pre_run_failure_is_retry_skips_run_but_runs_post(
    repo: Repo, options: RunnerOptions
) -> None:
    repo.script("pre.sh", "exit 2")
    repo.script("run.sh", "echo never")
    repo.script("post.sh", "exit 1")  # a post failure does not override RETRY
    spec = make_spec(repo, repo.commit(), pre_run=("pre.sh",), post_run=("post.sh",))

    result = run_build(spec, BaseControl(), options)

    assert result.result is Result.RETRY
    assert result.message == "pre-run pre.sh failed with exit code 2"
    assert [(s.phase, s.exit_code) for s in result.steps] == [
        (Phase.PRE_RUN, 2),
        (Phase.POST_RUN, 1),
    ]


def test_pre_run_failure_with_retry_vetoed_is_failure(repo: Repo, options: RunnerOptions) -> None:
    repo.script("pre.sh", 'echo \'{"zuul": {"retry": false}}\' > "$SLUICE_RESULT_FILE"\nexit 1')
    repo.script("run.sh", "echo never")
    spec = make_spec(repo, repo.commit(), pre_run=("pre.sh",))

    result = run_build(spec, BaseControl(), options)

    assert result.result is Result.FAILURE
    assert result.result_data == {"zuul": {"retry": False}}


def test_post_run_failure_is_post_failure_and_every_post_step_runs(
    repo: Repo, options: RunnerOptions
) -> None:
    repo.script("post1.sh", "exit 4")
    repo.script("post2.sh", 'touch "$SLUICE_LOG_DIR/post2-ran"')
    repo.script("run.sh", "true")
    spec = make_spec(repo, repo.commit(), post_run=("post1.sh", "post2.sh"))

    result = run_build(spec, BaseControl(), options)

    assert result.result is Result.POST_FAILURE
    assert result.message == "post-run post1.sh failed with exit code 4"
    assert exit_codes(result, Phase.POST_RUN) == [4, 0]
    assert (Path(result.log_path).parent / "post2-ran").exists()


def test_post_failure_overrides_run_failure_as_in_zuul(repo: Repo, options: RunnerOptions) -> None:
    repo.script("run.sh", "exit 1")
    repo.script("post.sh", "exit 1")
    spec = make_spec(repo, repo.commit(), post_run=("post.sh",))

    assert run_build(spec, BaseControl(), options).result is Result.POST_FAILURE


def test_post_timeout_bounds_each_post_step(repo: Repo, options: RunnerOptions) -> None:
    repo.script("run.sh", "true")
    repo.script("post.sh", "sleep 30")
    spec = make_spec(repo, repo.commit(), post_run=("post.sh",), post_timeout=0.5, timeout=30)

    result = run_build(spec, BaseControl(), options)

    assert result.result is Result.POST_FAILURE
    assert result.message == "post-run post.sh timed out"
    assert result.steps[-1].outcome is StepOutcome.TIMED_OUT
    assert result.ended_at - result.started_at < 5


def test_step_killed_by_a_signal_is_a_failure(repo: Repo, options: RunnerOptions) -> None:
    repo.script("run.sh", "kill -KILL $$")
    result = run_build(make_spec(repo, repo.commit()), BaseControl(), options)

    assert result.result is Result.FAILURE
    assert exit_codes(result, Phase.RUN) == [-9]
    assert result.message == "run run.sh was killed by signal 9"


def test_job_starts_with_default_signal_handling(repo: Repo, options: RunnerOptions) -> None:
    """Python ignores SIGPIPE; a job must not inherit that (``yes | head`` must end)."""
    repo.script("run.sh", 'grep SigIgn /proc/$$/status > "$SLUICE_LOG_DIR/sigign"\nyes | head -n 1')
    spec = make_spec(repo, repo.commit(), timeout=10)

    result = run_build(spec, BaseControl(), options)

    assert result.result is Result.SUCCESS, result.message
    ignored = (Path(result.log_path).parent / "sigign").read_text().split()[1]
    # Signals 1-31. Signals 32 and 33 are glibc's own (NPTL): GNU make ignores
    # them, so under `make test` everything inherits that, and no libc call
    # can reset them; glibc programs install their handlers for them anyway.
    standard = (1 << 31) - 1
    assert int(ignored, 16) & standard == 0


class FailingHooks(BaseControl):
    """Every hook raises: the build must go on regardless."""

    def cancel_requested(self) -> bool:
        raise RuntimeError("zookeeper is away")

    def on_started(self, info: StartedInfo) -> None:
        raise RuntimeError("on_started broke")

    def on_phase(self, phase: Phase) -> None:
        raise RuntimeError("on_phase broke")


def test_failing_hooks_never_stop_a_build(repo: Repo, options: RunnerOptions) -> None:
    repo.script("run.sh", "echo fine")
    result = run_build(make_spec(repo, repo.commit()), FailingHooks(), options)

    assert result.result is Result.SUCCESS, result.message


def test_a_runner_bug_is_retry_and_cleans_up(
    repo: Repo, options: RunnerOptions, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(runner, "write_job_files", broken)
    repo.script("run.sh", "true")
    spec = make_spec(repo, repo.commit())

    result = run_build(spec, BaseControl(), options)

    assert result.result is Result.RETRY
    assert result.message == "executor error: RuntimeError: boom"
    assert not (options.state_dir / "builds" / spec.context.build_uuid).exists()


def test_exit_code_above_128_is_not_taken_for_a_signal(repo: Repo, options: RunnerOptions) -> None:
    repo.script("run.sh", "exit 137")
    result = run_build(make_spec(repo, repo.commit()), BaseControl(), options)

    assert exit_codes(result, Phase.RUN) == [137]
    assert result.message == "run run.sh failed with exit code 137"
