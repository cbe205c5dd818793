"""Timeout, cancel, pause, and the job's process tree gone in every case."""

from __future__ import annotations

import os
import time
from pathlib import Path

from cli.stack.process import is_alive
from tests.executor.helpers import (
    LEFTOVERS,
    BuildThread,
    Repo,
    make_spec,
    processes_of_build,
    read_pids,
)
from tests.fixtures.waiting import wait_until
from workers.executor import (
    BaseControl,
    LocalControl,
    Phase,
    Result,
    RunnerOptions,
    StepOutcome,
    run_build,
)


def assert_tree_gone(log_dir: Path, build_uuid: str, expected: int = 3) -> None:
    pids = read_pids(log_dir / "pids")
    assert len(pids) == expected, pids
    assert [pid for pid in pids if is_alive(pid)] == []
    assert processes_of_build(build_uuid) == []


def test_timeout_is_timed_out_and_kills_the_tree(repo: Repo, options: RunnerOptions) -> None:
    repo.script("run.sh", LEFTOVERS + "sleep 30")
    repo.script("post.sh", 'touch "$SLUICE_LOG_DIR/post-ran"')
    spec = make_spec(repo, repo.commit(), timeout=1.0, post_run=("post.sh",))

    result = run_build(spec, BaseControl(), options)

    assert result.result is Result.TIMED_OUT
    assert result.message == "run run.sh timed out"
    assert result.steps[0].outcome is StepOutcome.TIMED_OUT
    assert result.steps[0].exit_code is None
    assert 1.0 <= result.steps[0].duration < 3.0
    log_dir = Path(result.log_path).parent
    assert_tree_gone(log_dir, spec.context.build_uuid)
    assert (log_dir / "post-ran").exists()  # post-run runs after a timeout (Zuul)


def test_timeout_covers_pre_run_and_run_together(repo: Repo, options: RunnerOptions) -> None:
    repo.script("pre.sh", "sleep 0.6")
    repo.script("run.sh", "sleep 0.6")
    spec = make_spec(repo, repo.commit(), pre_run=("pre.sh",), timeout=1.0)

    result = run_build(spec, BaseControl(), options)

    assert result.result is Result.TIMED_OUT
    assert [s.outcome for s in result.steps] == [StepOutcome.OK, StepOutcome.TIMED_OUT]


def test_cancel_aborts_within_two_seconds_and_kills_the_tree(
    repo: Repo, options: RunnerOptions
) -> None:
    repo.script("run.sh", LEFTOVERS + "sleep 30")
    repo.script("post.sh", 'touch "$SLUICE_LOG_DIR/post-ran"')
    spec = make_spec(repo, repo.commit(), post_run=("post.sh",))
    # The worker's defaults, not the fast ones of the other tests.
    defaults = RunnerOptions(state_dir=options.state_dir)
    control = LocalControl()
    build = BuildThread(spec, control, defaults)
    log_file = defaults.state_dir / "logs" / spec.context.build_uuid / "job-output.txt"
    wait_until(lambda: "leftovers started" in log_file.read_text(), 10, "the job to start")
    # One leftover really left the job's process group (setsid): killpg alone would miss it.
    groups = {os.getpgid(pid) for pid in read_pids(log_file.parent / "pids")}
    assert len(groups) == 2, groups

    cancelled_at = time.monotonic()
    control.cancel()
    result = build.join()
    took = time.monotonic() - cancelled_at

    assert took < 2.0, f"cancel took {took:.2f}s"
    assert result.result is Result.ABORTED
    assert result.message == "cancelled during run run.sh"
    assert_tree_gone(log_file.parent, spec.context.build_uuid)
    assert not (log_file.parent / "post-ran").exists()  # no post-run after a cancel
    assert control.phases == [Phase.RUN]


def test_leftovers_are_killed_when_the_step_ends(repo: Repo, options: RunnerOptions) -> None:
    """Background processes (ignoring SIGTERM, double-forked, setsid) die with their step."""
    repo.script("run.sh", LEFTOVERS + "exit 0")
    spec = make_spec(repo, repo.commit())

    result = run_build(spec, BaseControl(), options)

    assert result.result is Result.SUCCESS
    assert_tree_gone(Path(result.log_path).parent, spec.context.build_uuid)
    assert result.steps[0].duration < 3


def test_grandchild_ignoring_sigterm_is_killed(repo: Repo, options: RunnerOptions) -> None:
    repo.script(
        "run.sh",
        """
        sh -c 'trap "" TERM; echo $$ > "$SLUICE_LOG_DIR/pids"; while :; do sleep 0.1; done' &
        while [ ! -s "$SLUICE_LOG_DIR/pids" ]; do sleep 0.02; done
        trap "" TERM
        sleep 30
        """,
    )
    spec = make_spec(repo, repo.commit(), timeout=0.5)

    result = run_build(spec, BaseControl(), options)

    assert result.result is Result.TIMED_OUT
    assert_tree_gone(Path(result.log_path).parent, spec.context.build_uuid, expected=1)


def test_cancel_before_start_runs_nothing(repo: Repo, options: RunnerOptions) -> None:
    repo.script("run.sh", "true")
    control = LocalControl()
    control.cancel()

    result = run_build(make_spec(repo, repo.commit()), control, options)

    assert result.result is Result.ABORTED
    assert result.steps == ()


def test_pause_waits_for_resume_then_runs_post(repo: Repo, options: RunnerOptions) -> None:
    repo.script("run.sh", 'echo \'{"zuul": {"pause": true}, "url": "x"}\' > "$SLUICE_RESULT_FILE"')
    repo.script("post.sh", 'touch "$SLUICE_LOG_DIR/post-ran"')
    spec = make_spec(repo, repo.commit(), post_run=("post.sh",))
    control = LocalControl()
    build = BuildThread(spec, control, options)

    assert control.paused.wait(10)
    assert control.paused_data == {"zuul": {"pause": True}, "url": "x"}
    time.sleep(0.2)
    assert build.thread.is_alive()
    post_ran = options.state_dir / "logs" / spec.context.build_uuid / "post-ran"
    assert not post_ran.exists()
    control.resume()
    result = build.join()

    assert result.result is Result.SUCCESS
    assert post_ran.exists()


def test_cancel_while_paused_is_aborted(repo: Repo, options: RunnerOptions) -> None:
    repo.script("run.sh", 'echo \'{"zuul": {"pause": true}}\' > "$SLUICE_RESULT_FILE"')
    control = LocalControl()
    build = BuildThread(make_spec(repo, repo.commit()), control, options)
    assert control.paused.wait(10)

    control.cancel()
    result = build.join()

    assert result.result is Result.ABORTED
    assert result.message == "cancelled while paused"


def test_two_builds_run_side_by_side_in_one_process(repo: Repo, options: RunnerOptions) -> None:
    repo.script("run.sh", 'sleep 0.3; echo "done $SLUICE_BUILD"')
    commit = repo.commit()
    builds = [BuildThread(make_spec(repo, commit), LocalControl(), options) for _ in range(2)]
    started = time.monotonic()

    results = [build.join() for build in builds]

    assert time.monotonic() - started < 3
    for build, result in zip(builds, results, strict=True):
        assert result.result is Result.SUCCESS, result.message
        assert any(
            line.endswith(f"| run | done {build.spec.context.build_uuid}")
            for line in result.log_tail
        )


class CancelOnSecondAsk(BaseControl):
    """Says "cancel" from its second call on: after the build started preparing."""

    def __init__(self) -> None:
        self.asked = 0

    def cancel_requested(self) -> bool:
        self.asked += 1
        return self.asked > 1


def test_cancel_while_preparing_the_workspace(
    repo: Repo, tmp_path: Path, options: RunnerOptions
) -> None:
    repo.script("run.sh", "true")
    lib = Repo.create(tmp_path / "repos" / "lib")
    state = {"main": lib.commit()}
    spec = make_spec(repo, repo.commit(), others={"org/lib": (str(lib.path), state)})

    result = run_build(spec, CancelOnSecondAsk(), options)

    assert result.result is Result.ABORTED
    assert result.message == "cancelled while preparing the workspace"
    assert result.steps == ()
    assert not (options.state_dir / "builds" / spec.context.build_uuid).exists()
