"""Finding and ending the processes that work in a folder (``workers/merger/orphans.py``).

The end-to-end cases (a worker killed mid-clone and mid-fetch) are in
``test_cache.py``; these pin the parts: what counts as working in a folder,
that SIGKILL is waited out, that a zombie counts as ended, and that a
machine without ``/proc`` ends nothing.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from workers.merger import orphans
from workers.merger.orphans import end_processes_in, working_in


def sleeper(cwd: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(["sleep", "60"], cwd=cwd)


def test_a_process_working_in_the_folder_or_below_is_found(tmp_path: Path) -> None:
    repo, below, beside = tmp_path / "repo", tmp_path / "repo" / "objects", tmp_path / "repo.work"
    for folder in (repo, below, beside):
        folder.mkdir()
    procs = [sleeper(below), sleeper(beside), sleeper(tmp_path)]
    try:
        found = working_in([repo])
        assert procs[0].pid in found
        assert procs[1].pid not in found and procs[2].pid not in found
        assert procs[1].pid in working_in([repo, beside])
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def test_ending_kills_and_waits(tmp_path: Path) -> None:
    proc = sleeper(tmp_path)
    started = time.monotonic()
    assert end_processes_in([tmp_path], "test") == [proc.pid]
    # Our own child stays a zombie until we reap it: ended all the same.
    assert time.monotonic() - started < 5
    assert proc.wait(timeout=5) == -9
    assert end_processes_in([tmp_path], "test") == []


def test_without_proc_nothing_is_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    proc = sleeper(tmp_path)
    try:
        monkeypatch.setattr(orphans, "PROC", tmp_path / "no-proc")
        assert working_in([tmp_path]) == []
        assert end_processes_in([tmp_path], "test") == []
    finally:
        proc.kill()
        proc.wait()
