"""Where a worker's CPU goes: a cProfile of each pool process (``SLUICE_PROFILE_DIR``).

Issue 17 asks where a build's CPU goes in each worker. With
``SLUICE_PROFILE_DIR`` set in a worker's environment, every prefork pool
process profiles itself from its start (``worker_process_init``) and
writes ``<dir>/<hostname>-<pid>.prof`` (``pstats`` format) after its first
task, after a later task when a second has passed since its last write,
and when it exits: the files are there whether the worker is stopped
cleanly or not.
``bench/throughput.py --profile DIR`` sets it for its workers and prints
the top functions of each kind of worker. Unset (always, in production)
nothing is connected.

Only the pool processes are profiled (they run the tasks); the worker's
main process (consuming, the bootsteps' threads) and child processes
(git, jobs) are not.
"""

from __future__ import annotations

import cProfile
import os
import socket
import time
from pathlib import Path
from typing import Any

from celery.signals import task_postrun, worker_process_init, worker_process_shutdown

PROFILE_DIR = "SLUICE_PROFILE_DIR"
WRITE_EVERY = 1.0  # seconds between two writes of a process's profile

_state: dict[str, Any] = {}


def install() -> None:
    """Connect the signals when ``SLUICE_PROFILE_DIR`` is set (called on import by tasks.app)."""
    if not os.environ.get(PROFILE_DIR):
        return
    worker_process_init.connect(_start, weak=False)
    task_postrun.connect(_maybe_write, weak=False)
    worker_process_shutdown.connect(_write, weak=False)


def _start(**_: Any) -> None:
    profile = cProfile.Profile(time.process_time)  # CPU, not the wall clock
    _state.update(profile=profile, written=0.0)  # the first task writes at once
    profile.enable()


def _maybe_write(**_: Any) -> None:
    if time.monotonic() - _state.get("written", 0.0) >= WRITE_EVERY:
        _write()


def _write(**_: Any) -> None:
    profile: cProfile.Profile | None = _state.get("profile")
    if profile is None:
        return
    folder = Path(os.environ[PROFILE_DIR])
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"{socket.gethostname()}-{os.getpid()}.prof"
    profile.disable()
    try:
        partial = target.with_suffix(".tmp")
        profile.dump_stats(partial)
        partial.replace(target)
    finally:
        profile.enable()
    _state["written"] = time.monotonic()
