"""job-output.txt: streamed while the build runs, stamped, with phase markers."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from scheduler.errors import SettingsError
from tests.executor.helpers import BuildThread, Repo, make_spec
from tests.fixtures.waiting import wait_until
from workers.executor import BaseControl, LocalControl, Result, RunnerOptions, run_build
from workers.executor.joblog import MAX_LINE, JobLog, LineSplitter

STAMP = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{6}"


def test_log_is_readable_while_the_build_runs(repo: Repo, options: RunnerOptions) -> None:
    repo.script(
        "run.sh",
        """
        echo first
        i=0
        while [ ! -e "$SLUICE_WORKSPACE/go" ] && [ $i -lt 400 ]; do sleep 0.05; i=$((i+1)); done
        echo second
        """,
    )
    spec = make_spec(repo, repo.commit())
    control = LocalControl()
    build = BuildThread(spec, control, options)
    assert control.started.wait(10)
    assert control.info is not None
    log_file = Path(control.info.log_path)
    assert log_file == options.state_dir / "logs" / spec.context.build_uuid / "job-output.txt"

    text = wait_until(
        lambda: log_file.read_text() if "| run | first" in log_file.read_text() else "",
        10,
        "the first line in the log",
    )
    assert build.thread.is_alive()
    assert "second" not in text
    (Path(control.info.workspace) / "go").touch()
    result = build.join()

    assert result.result is Result.SUCCESS
    assert "| run | second" in log_file.read_text()


def test_log_lines_are_stamped_with_phase_markers(repo: Repo, options: RunnerOptions) -> None:
    repo.script("pre.sh", "echo preparing")
    repo.script("run.sh", "echo out; echo err >&2; printf 'no newline'")
    spec = make_spec(repo, repo.commit(), pre_run=("pre.sh",))

    result = run_build(spec, BaseControl(), options)

    lines = Path(result.log_path).read_text().splitlines()
    assert all(re.match(STAMP + r" \| ", line) for line in lines)
    bodies = [line.split(" | ", 1)[1] for line in lines]
    assert bodies[0].startswith(
        f"Sluice build {spec.context.build_uuid}: job unit-tests of org/project"
    )
    assert bodies[2:] == [
        "PRE-RUN START: pre.sh",
        "pre-run | preparing",
        bodies[4],
        "RUN START: run.sh",
        "run | out",
        "run | err",
        "run | no newline",
        bodies[9],
        "RESULT SUCCESS",
    ]
    assert re.fullmatch(r"PRE-RUN END: pre-run pre.sh exit 0 \(\d+\.\d\ds\)", bodies[4])
    assert re.fullmatch(r"RUN END: run run.sh exit 0 \(\d+\.\d\ds\)", bodies[9])
    assert result.log_tail == tuple(lines)
    assert result.message == "success"


def test_result_keeps_the_last_lines(repo: Repo, options: RunnerOptions) -> None:
    repo.script("run.sh", "seq 1 200")
    result = run_build(make_spec(repo, repo.commit()), BaseControl(), options)

    assert len(result.log_tail) == options.tail_lines
    assert result.log_tail[-3].endswith("| run | 200")
    assert result.log_tail[-1].endswith("| RESULT SUCCESS")


def test_long_lines_are_cut_and_bad_bytes_replaced(tmp_path: Path) -> None:
    log = JobLog(tmp_path / "job-output.txt")
    splitter = LineSplitter(log, "run")
    splitter.feed(b"a" * (MAX_LINE + 10))
    splitter.feed(b"\xff\xfe ok\r\nlast")
    splitter.flush()
    log.close()

    bodies = [line.split(" | ", 2)[2] for line in log.path.read_text().splitlines()]
    assert bodies == ["a" * MAX_LINE, "a" * 10 + "\ufffd\ufffd ok", "last"]


def test_job_output_beyond_the_limit_is_dropped(repo: Repo, options: RunnerOptions) -> None:
    repo.script("run.sh", "seq 1 1000")
    limited = RunnerOptions(state_dir=options.state_dir, log_limit=100)

    result = run_build(make_spec(repo, repo.commit()), BaseControl(), limited)

    assert result.result is Result.SUCCESS
    text = Path(result.log_path).read_text()
    assert "| run | 30\n" in text
    assert "| run | 60\n" not in text
    assert "LOG LIMIT: job output beyond 100 characters dropped" in text
    assert "RUN END: run run.sh exit 0" in text


def test_options_keep_cancel_within_two_seconds(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="below 2 s"):
        RunnerOptions(state_dir=tmp_path, poll_interval=0.5, kill_grace=1.5)
    with pytest.raises(SettingsError, match="poll_interval must be > 0"):
        RunnerOptions(state_dir=tmp_path, poll_interval=0)
