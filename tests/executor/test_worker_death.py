"""Builds in other processes: a worker killed mid-build, the command line."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from cli.stack.process import is_alive
from tests.executor.helpers import LEFTOVERS, Repo, make_spec, processes_of_build, read_pids
from tests.fixtures.waiting import wait_until
from workers.executor import RunnerOptions
from workers.executor.workspace import remove_stale_workspaces

ROOT = Path(__file__).resolve().parents[2]

RUN_ONE_BUILD = """
import sys
from pathlib import Path
from workers.executor import BaseControl, BuildSpec, RunnerOptions, run_build
spec = BuildSpec.from_json(Path(sys.argv[1]).read_text())
run_build(spec, BaseControl(), RunnerOptions(state_dir=Path(sys.argv[2])))
"""


def read_cmdline(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_text().split("\0")


def parent_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def test_killed_worker_leaves_no_job_processes(
    repo: Repo, tmp_path: Path, options: RunnerOptions
) -> None:
    """The step's reaper was forked by the worker's zygote; all of them die with the worker."""
    repo.script("run.sh", 'echo $PPID > "$SLUICE_LOG_DIR/reaper"\n' + LEFTOVERS + "sleep 30")
    spec = make_spec(repo, repo.commit())
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(json.dumps(spec.to_dict()))
    worker = subprocess.Popen(
        [sys.executable, "-c", RUN_ONE_BUILD, str(spec_file), str(options.state_dir)],
        cwd=ROOT,
    )
    try:
        log_dir = options.state_dir / "logs" / spec.context.build_uuid
        wait_until(
            lambda: "leftovers started" in (log_dir / "job-output.txt").read_text(),
            10,
            "the job to start",
        )
        assert len(processes_of_build(spec.context.build_uuid)) >= 4
        reaper = int((log_dir / "reaper").read_text())
        zygote = parent_of(reaper)
        assert parent_of(zygote) == worker.pid
        assert str(ROOT / "workers" / "executor" / "zygote.py") in read_cmdline(zygote)

        os.kill(worker.pid, signal.SIGKILL)
        worker.wait(5)

        wait_until(
            lambda: not processes_of_build(spec.context.build_uuid), 5, "the job's tree to die"
        )
        assert not [pid for pid in read_pids(log_dir / "pids") if is_alive(pid)]
        wait_until(lambda: not is_alive(reaper) and not is_alive(zygote), 5, "reaper and zygote")
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()

    # The next start of the worker removes what the dead one left.
    assert remove_stale_workspaces(options.state_dir, keep=set()) == [spec.context.build_uuid]
    assert not (options.state_dir / "builds" / spec.context.build_uuid).exists()
    assert (options.state_dir / "logs" / spec.context.build_uuid / "job-output.txt").exists()


def test_command_line_runs_a_spec_and_sigint_cancels(
    repo: Repo, tmp_path: Path, options: RunnerOptions
) -> None:
    repo.script("run.sh", "echo ready\nsleep 30")
    spec = make_spec(repo, repo.commit())
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(json.dumps(spec.to_dict()))
    command = [sys.executable, "-m", "workers.executor", str(spec_file)]
    cli = subprocess.Popen(
        [*command, "--state-dir", str(options.state_dir)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        log_file = options.state_dir / "logs" / spec.context.build_uuid / "job-output.txt"
        wait_until(lambda: "| run | ready" in log_file.read_text(), 10, "the job to start")
        cli.send_signal(signal.SIGINT)
        out, err = cli.communicate(timeout=10)
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.wait()

    assert cli.returncode == 1
    assert json.loads(out)["result"] == "ABORTED"
    assert f"log: {log_file}" in err
    assert processes_of_build(spec.context.build_uuid) == []
