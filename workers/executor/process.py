"""Running one executable of a job: its process tree, output, deadline and cancel.

Each step runs under the reaper (``reaper.py``) in a session and process
group of its own, with the step's working directory and environment, stdin
from ``/dev/null``, stdout and stderr to one pipe of ours. The reaper is
forked by this process's zygote (``zygote.py``, through
:mod:`workers.executor.forkserver`: a fork instead of an interpreter's
start); when the zygote fails it is started directly, as ``python -I -S
reaper.py``, for that step. Its output (stdout and stderr together) is read
from the pipe and written to the job log line by line as it comes. While
it runs, the deadline and the cancel hook are checked every
``poll_interval`` seconds; when either fires, the reaper gets SIGTERM and
terminates the whole tree (SIGTERM, then SIGKILL after ``kill_grace``
seconds).

How the step ended comes from its status pipe, which the job cannot write
to: the reaper's own line (``exit N``, ``signal N``, ``stopped N``), then,
on the zygote's path, how the reaper itself ended (``reaper exit N``,
written when the zygote reaps it). End of file on that pipe means the
reaper is gone: the zygote reaped it, or (started directly) it exited and
we reap it. A reaper killed before it wrote its line is reported by how it
ended (a signal as a negative code).

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
import select
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from scheduler.wire.build_result import StepOutcome
from workers.executor import forkserver
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
    namespaces: Sequence[int] = (),
) -> StepExit:
    """Run ``executable`` to its end or until a limit fires; its tree is gone after.

    ``prefix`` wraps it (the sandbox: ``bwrap ... --``); ``args`` follow it;
    ``namespaces`` are its build's, for a sandboxed step to join
    (:func:`workers.executor.forkserver.build_namespaces`): a reaper started
    directly makes namespaces of its own instead.
    """
    command = [*prefix, str(executable), *args]
    reaper = _start_reaper(command, cwd, env, limits.kill_grace, namespaces)
    try:
        stopped = _Streamer(reaper, output, limits).run()
    finally:
        _finish(reaper, limits.kill_grace)
        output.flush()
    if stopped is not None:
        return StepExit(stopped, None)
    code = reaper.exit_code()
    return StepExit(StepOutcome.OK if code == 0 else StepOutcome.FAILED, code)


def reaper_argv(command: Sequence[str], grace: float, status_fd: int) -> list[str]:
    """The argv that runs ``command`` under the reaper (``reaper.py``'s usage)."""
    argv = [sys.executable, "-I", "-S", str(REAPER), str(grace), str(os.getpid())]
    return [*argv, str(status_fd), "--", *command]


class _Reaper:
    """A step's running reaper: its pid, the read ends of its output and status pipes.

    ``process`` is the reaper started directly, ours to reap; it is None
    when the zygote forked the reaper (the zygote reaps it).
    """

    def __init__(
        self,
        pid: int,
        output: int,
        status: int,
        process: subprocess.Popen[bytes] | None = None,
    ) -> None:
        self.pid = pid
        self.output = output
        self.process = process
        self._status_fd = status
        self.status = b""  # the status pipe's lines so far
        self.gone = False  # its end of file: the reaper exited (and the zygote reaped it)

    def wait(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the reaper to be gone and reaped."""
        deadline = time.monotonic() + timeout
        if not self.gone:
            data, self.gone = _read_until_eof(self._status_fd, deadline)
            self.status += data
        if self.process is not None and self.gone:
            try:
                self.process.wait(max(deadline - time.monotonic(), 0.0))
            except subprocess.TimeoutExpired:
                return False
        return self.gone

    def signal(self, sig: int) -> None:
        """Signal the reaper unless it is known to be gone (its pid may be another's)."""
        if self.process is not None:
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(sig)  # never a reaped pid
            return
        if not self.wait(0.0):
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def exit_code(self) -> int:
        returncode = self.process.returncode if self.process is not None else None
        return _exit_code(self.status.decode(errors="replace"), returncode)

    def close(self) -> None:
        os.close(self.output)
        os.close(self._status_fd)


def _start_reaper(
    command: Sequence[str],
    cwd: Path,
    env: Mapping[str, str],
    grace: float,
    namespaces: Sequence[int] = (),
) -> _Reaper:
    """The step's reaper, forked by the zygote or, when that fails, started directly."""
    cwd_fd = os.open(cwd, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)  # as Popen's cwd= fails
    try:
        reaper = _fork_reaper(command, cwd_fd, env, grace, namespaces)
    finally:
        os.close(cwd_fd)
    return reaper if reaper is not None else _popen_reaper(command, cwd, env, grace)


def _fork_reaper(
    command: Sequence[str],
    cwd_fd: int,
    env: Mapping[str, str],
    grace: float,
    namespaces: Sequence[int] = (),
) -> _Reaper | None:
    """The reaper forked by this process's zygote; None when the zygote failed."""
    output_read, output_write = os.pipe()
    status_read, status_write = os.pipe()
    try:
        try:
            pid = forkserver.fork_reaper(
                command,
                env,
                grace,
                output_fd=output_write,
                status_fd=status_write,
                cwd_fd=cwd_fd,
                namespaces=namespaces,
            )
        finally:
            os.close(output_write)
            os.close(status_write)
    except forkserver.ZygoteError as failure:
        if failure.maybe_started:  # a reaper forked before the zygote died is stopping
            _read_until_eof(status_read, time.monotonic() + grace + REAPER_SLACK)
        os.close(output_read)
        os.close(status_read)
        return None
    except BaseException:
        os.close(output_read)
        os.close(status_read)
        raise
    return _Reaper(pid, output_read, status_read)


def _popen_reaper(
    command: Sequence[str], cwd: Path, env: Mapping[str, str], grace: float
) -> _Reaper:
    """The reaper started as an interpreter of its own (``python -I -S reaper.py``)."""
    output_read, output_write = os.pipe()
    status_read, status_write = os.pipe()
    try:
        process = subprocess.Popen(
            reaper_argv(command, grace, status_write),
            cwd=cwd,
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=output_write,
            stderr=output_write,
            start_new_session=True,
            close_fds=True,
            pass_fds=(status_write,),
        )
    except BaseException:
        os.close(output_read)
        os.close(status_read)
        raise
    finally:
        os.close(output_write)
        os.close(status_write)
    return _Reaper(process.pid, output_read, status_read, process)


def _read_until_eof(fd: int, deadline: float) -> tuple[bytes, bool]:
    """What ``fd`` gives until its end of file or ``deadline``; whether the end came."""
    os.set_blocking(fd, False)
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    data = b""
    while True:
        try:
            chunk = os.read(fd, 4096)
        except BlockingIOError:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return data, False
            poller.poll(remaining * 1000)
            continue
        if not chunk:
            return data, True
        data += chunk


def _exit_code(status: str, returncode: int | None) -> int:
    """The executable's exit code (negative for a signal) from the status pipe's lines.

    The reaper's own line says how the executable ended. Without one (the
    reaper itself was killed), how the reaper ended: the zygote's ``reaper
    ...`` line, or the return code of a reaper started directly.
    """
    own: int | None = None
    for line in status.splitlines():
        words = line.split()
        if len(words) == 3 and words[0] == "reaper":
            returncode = _status_number(words[1], words[2])
        elif len(words) == 2 and own is None:
            own = _status_number(words[0], words[1])
    if own is not None:
        return own
    if returncode is not None:
        return returncode
    log.error("a step's reaper ended without a word on how (its zygote died too)")
    return -signal.SIGKILL


def _status_number(kind: str, number: str) -> int | None:
    if not number.lstrip("-").isdigit():
        return None
    return -int(number) if kind == "signal" else int(number)


class _Streamer:
    """Copies a step's output to the log while watching its deadline and cancel."""

    def __init__(self, reaper: _Reaper, output: LineSplitter, limits: StepLimits) -> None:
        self.reaper = reaper
        self.fd = reaper.output
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
                self.reaper.signal(signal.SIGTERM)
        elif self.kill_at is not None and now >= self.kill_at:
            self.kill_at = None
            _kill_group(self.reaper.pid)

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


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)


def _finish(reaper: _Reaper, grace: float) -> None:
    """Make sure the reaper exited and its process group is empty."""
    try:
        # After EOF the reaper is exiting; otherwise (an exception) stop it.
        if not reaper.wait(0.5):
            reaper.signal(signal.SIGTERM)
            if not reaper.wait(grace + REAPER_SLACK):
                _kill_group(reaper.pid)
                if not reaper.wait(REAPER_SLACK):
                    log.error("reaper %d: not reaped %.0fs after SIGKILL", reaper.pid, REAPER_SLACK)
    finally:
        reaper.close()
    survivors = wait_group_empty(reaper.pid, timeout=1.0)
    if survivors:
        _kill_group(reaper.pid)
        survivors = wait_group_empty(reaper.pid, timeout=2.0)
    if survivors:
        error = ProcessCleanupError(f"processes {survivors} of group {reaper.pid} survive SIGKILL")
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
