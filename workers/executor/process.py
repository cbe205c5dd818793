"""Running one executable of a job: its process tree, output, deadline and cancel.

Each step runs under the reaper (``reaper.py``) in a session and process
group of its own. Its output (stdout and stderr together) is read from a
pipe and written to the job log line by line as it comes. While it runs,
the deadline and the cancel hook are checked every ``poll_interval``
seconds; when either fires, the reaper gets SIGTERM and terminates the
whole tree (SIGTERM, then SIGKILL after ``kill_grace`` seconds).

Whatever happens (a normal exit, a timeout, a cancel, an exception in the
runner), the step ends with its process group verified empty through
``/proc``; a reaper that does not finish in time is killed with its group.
Descendants that left the group (``setsid``) are the reaper's to kill: it
is their subreaper, so they are still in its tree.
"""

from __future__ import annotations

import contextlib
import logging
import os
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from scheduler.wire.build_result import StepOutcome
from workers.executor.errors import ProcessCleanupError
from workers.executor.joblog import LineSplitter

log = logging.getLogger(__name__)

REAPER = Path(__file__).with_name("reaper.py")
# How long after the reaper was told to stop before its group is SIGKILLed.
REAPER_SLACK = 2.0


@dataclass(frozen=True)
class StepLimits:
    """When to stop a step: a ``time.monotonic()`` deadline and a cancel poll."""

    deadline: float | None
    cancel_requested: Callable[[], bool]
    poll_interval: float = 0.2
    kill_grace: float = 1.0


@dataclass(frozen=True)
class StepExit:
    """How a step ended: the outcome and the exit code (None when killed)."""

    outcome: StepOutcome
    exit_code: int | None


def run_step(
    executable: Path,
    *,
    cwd: Path,
    env: Mapping[str, str],
    output: LineSplitter,
    limits: StepLimits,
    prefix: Sequence[str] = (),
    args: Sequence[str] = (),
) -> StepExit:
    """Run ``executable`` to its end or until a limit fires; its tree is gone after.

    ``prefix`` wraps it (the sandbox: ``bwrap ... --``); ``args`` follow it.
    """
    command = [*prefix, str(executable), *args]
    status_read, status_write = os.pipe()
    try:
        proc = _start_reaper(command, cwd, env, limits.kill_grace, status_write)
    finally:
        os.close(status_write)
    with os.fdopen(status_read, "rb") as status_pipe:
        try:
            stopped = _Streamer(proc, output, limits).run()
        finally:
            _finish(proc, limits.kill_grace)
            output.flush()
        status = status_pipe.read().decode(errors="replace").split()
    if stopped is not None:
        return StepExit(stopped, None)
    code = _exit_code(status, proc.returncode)
    return StepExit(StepOutcome.OK if code == 0 else StepOutcome.FAILED, code)


def reaper_argv(command: Sequence[str], grace: float, status_fd: int) -> list[str]:
    """The argv that runs ``command`` under the reaper (``reaper.py``'s usage)."""
    argv = [sys.executable, "-I", "-S", str(REAPER), str(grace), str(os.getpid())]
    return [*argv, str(status_fd), "--", *command]


def _start_reaper(
    command: Sequence[str], cwd: Path, env: Mapping[str, str], grace: float, status_fd: int
) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        reaper_argv(command, grace, status_fd),
        cwd=cwd,
        env=dict(env),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        close_fds=True,
        pass_fds=(status_fd,),
    )


def _exit_code(status: list[str], returncode: int) -> int:
    """The executable's exit code (negative for a signal) from the reaper's status line."""
    if len(status) == 2 and status[1].lstrip("-").isdigit():
        kind, number = status[0], int(status[1])
        return -number if kind == "signal" else number
    return returncode  # no status line: the reaper itself was killed


class _Streamer:
    """Copies a step's output to the log while watching its deadline and cancel."""

    def __init__(
        self, proc: subprocess.Popen[bytes], output: LineSplitter, limits: StepLimits
    ) -> None:
        assert proc.stdout is not None
        self.proc = proc
        self.fd = proc.stdout.fileno()
        self.output = output
        self.limits = limits
        self.stopped: StepOutcome | None = None
        self.kill_at: float | None = None
        self.give_up_at: float | None = None
        self.next_cancel_check = 0.0

    def run(self) -> StepOutcome | None:
        """Stream until EOF (the whole tree closed the pipe); why it was stopped."""
        os.set_blocking(self.fd, False)
        with selectors.DefaultSelector() as selector:
            selector.register(self.fd, selectors.EVENT_READ)
            while True:
                now = time.monotonic()
                self._check(now)
                if self.give_up_at is not None and now >= self.give_up_at:
                    return self.stopped  # something holds the pipe; the group is checked next
                if selector.select(self._wait(now)) and not self._read():
                    return self.stopped

    def _read(self) -> bool:
        try:
            chunk = os.read(self.fd, 65536)
        except BlockingIOError:
            return True
        if not chunk:
            return False
        self.output.feed(chunk)
        return True

    def _wait(self, now: float) -> float:
        wait = self.limits.poll_interval
        if self.stopped is None and self.limits.deadline is not None:
            wait = min(wait, self.limits.deadline - now)
        return max(wait, 0.0)

    def _check(self, now: float) -> None:
        if self.stopped is None:
            reason = self._limit_reached(now)
            if reason is not None:
                self.stopped = reason
                self.kill_at = now + self.limits.kill_grace + REAPER_SLACK
                self.give_up_at = self.kill_at + REAPER_SLACK
                _signal(self.proc, signal.SIGTERM)
        elif self.kill_at is not None and now >= self.kill_at:
            self.kill_at = None
            _kill_group(self.proc.pid)

    def _limit_reached(self, now: float) -> StepOutcome | None:
        if self.limits.deadline is not None and now >= self.limits.deadline:
            return StepOutcome.TIMED_OUT
        if now >= self.next_cancel_check:
            self.next_cancel_check = now + self.limits.poll_interval
            if cancel_requested(self.limits.cancel_requested):
                return StepOutcome.ABORTED
        return None


def cancel_requested(poll: Callable[[], bool]) -> bool:
    """Call a cancel hook; a hook that raises is logged and counts as no."""
    try:
        return bool(poll())
    except Exception:  # a failing hook never stops a build
        log.exception("cancel_requested hook failed")
        return False


def _signal(proc: subprocess.Popen[bytes], sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(sig)


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)


def _finish(proc: subprocess.Popen[bytes], grace: float) -> None:
    """Make sure the reaper exited and its process group is empty."""
    try:
        # After EOF the reaper is exiting; otherwise (an exception) stop it.
        proc.wait(timeout=0.5)
    except subprocess.TimeoutExpired:
        _signal(proc, signal.SIGTERM)
        try:
            proc.wait(timeout=grace + REAPER_SLACK)
        except subprocess.TimeoutExpired:
            _kill_group(proc.pid)
            proc.wait()
    finally:
        if proc.stdout is not None:
            proc.stdout.close()
    survivors = wait_group_empty(proc.pid, timeout=1.0)
    if survivors:
        _kill_group(proc.pid)
        survivors = wait_group_empty(proc.pid, timeout=2.0)
    if survivors:
        error = ProcessCleanupError(f"processes {survivors} of group {proc.pid} survive SIGKILL")
        log.error("%s", error)


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes of process group ``pgid``, read from ``/proc``."""
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                fields = handle.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
            members.append(int(entry))
    return members


def group_exists(pgid: int) -> bool:
    """Whether any process, a zombie included, is in group ``pgid`` (one system call)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # a member we may not signal still is one
    return True


def wait_group_empty(pgid: int, timeout: float) -> list[int]:
    """Poll until group ``pgid`` has no live member; what is left at ``timeout``.

    The usual case, a group already gone, costs one ``killpg(pgid, 0)``;
    only a group that still has members is read from ``/proc`` (to tell
    the live ones from zombies).
    """
    deadline = time.monotonic() + timeout
    while True:
        members = group_members(pgid) if group_exists(pgid) else []
        if not members or time.monotonic() >= deadline:
            return members
        time.sleep(0.02)
