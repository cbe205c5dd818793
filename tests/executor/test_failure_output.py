"""A job's failure-output: the run steps' lines searched, the build pre-failed once."""

from __future__ import annotations

import time
from pathlib import Path

from tests.executor.helpers import Repo, make_spec
from workers.executor import Result, RunnerOptions, run_build
from workers.executor.control import LocalControl
from workers.executor.failureoutput import MATCHED_LINE, FailureOutput


def test_a_matching_run_line_pre_fails_the_build_once_and_it_runs_on(
    repo: Repo, options: RunnerOptions
) -> None:
    repo.script("pre.sh", "echo 'FAIL: in pre-run, not searched'")
    repo.script(
        "run.sh",
        "echo all good\necho 'FAIL: test_one'\necho 'FAIL: test_two'\n"
        'echo still running > "$SLUICE_LOG_DIR/after"',
    )
    spec = make_spec(repo, repo.commit(), pre_run=("pre.sh",), failure_output=("^FAIL: ",))
    control = LocalControl()

    result = run_build(spec, control, options)

    assert control.pre_failed == ["FAIL: test_one"]
    assert (Path(result.log_path).parent / "after").read_text() == "still running\n"
    # the steps succeeded, but a pre-failed build is a FAILURE (Zuul)
    assert result.result is Result.FAILURE
    assert result.message == "failure-output matched: FAIL: test_one"
    log = Path(result.log_path).read_text()
    assert "FAILURE OUTPUT matched: FAIL: test_one" in log


def test_a_failing_run_step_keeps_its_own_message_too(repo: Repo, options: RunnerOptions) -> None:
    repo.script("run.sh", "echo 'ERROR: broken'\nexit 2")
    spec = make_spec(repo, repo.commit(), failure_output=("ERROR",))
    control = LocalControl()

    result = run_build(spec, control, options)

    assert control.pre_failed == ["ERROR: broken"]
    assert result.result is Result.FAILURE
    assert result.message == (
        "run run.sh failed with exit code 2; failure-output matched: ERROR: broken"
    )


def test_no_match_no_pre_fail(repo: Repo, options: RunnerOptions) -> None:
    repo.script("run.sh", "echo fine")
    control = LocalControl()
    result = run_build(make_spec(repo, repo.commit(), failure_output=("^FAIL",)), control, options)
    assert result.result is Result.SUCCESS and control.pre_failed == []


def test_only_the_first_bytes_of_a_long_line_are_searched() -> None:
    seen: list[str] = []
    watch = FailureOutput(["FAIL"], seen.append)
    watch.check("x" * MATCHED_LINE + "FAIL")  # beyond the bound: not searched
    assert seen == [] and watch.matched is None
    watch.check("x" * (MATCHED_LINE - 4) + "FAIL" + "y" * 10_000)
    assert seen == ["x" * (MATCHED_LINE - 4) + "FAIL"]  # the cut line
    watch.check("FAIL again")
    assert len(seen) == 1


def test_a_catastrophic_pattern_on_a_long_line_takes_little_time() -> None:
    # accepted by the policy (one repetition): quadratic on the cut line at worst
    watch = FailureOutput([r"\w*\d"], lambda line: None)
    began = time.monotonic()
    watch.check("a" * 1_000_000)
    assert time.monotonic() - began < 2.0
