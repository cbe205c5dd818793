"""Steps forked by the process's zygote, and the direct start when the zygote fails.

Real processes throughout: the zygote, its reapers, shell steps. The
direct path (``python -I -S reaper.py``) is reached as in production, by a
zygote that cannot start (its script missing), that was killed, or that
hangs.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cli.stack.process import is_alive
from tests.executor.helpers import LEFTOVERS, read_pids
from tests.fixtures.waiting import wait_until
from workers.executor import StepOutcome, forkserver
from workers.executor.joblog import JobLog, LineSplitter
from workers.executor.process import StepExit, StepLimits, run_step

SH = Path("/bin/sh")
# What a step says about itself: its reaper's parent, session, group, stdin,
# folder and environment.
WHO_AM_I = """
set -- $(cut -d' ' -f4-6 /proc/$$/stat)
echo "reaper $PPID parent $(cut -d' ' -f4 /proc/$PPID/stat)"
echo "group $2 session $3"
echo "stdin $(readlink /proc/$$/fd/0)"
echo "cwd $(pwd)"
echo "env $(env | grep -v '^PWD=' | sort | tr '\\n' ' ')"
echo "to stderr" >&2
"""


class Steps:
    """Runs shell steps with ``run_step`` into a job log; their output lines."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.log = JobLog(folder / "job-output.txt", tail_lines=1000)
        self.env = {"PATH": os.defpath, "SLUICE_LOG_DIR": str(folder), "ONLY": "this"}

    def run(
        self, script: str, *, deadline: float | None = None, cancel_after: float | None = None
    ) -> tuple[StepExit, list[str]]:
        before = len(self.log.tail())
        cancel_at = None if cancel_after is None else time.monotonic() + cancel_after
        limits = StepLimits(
            deadline=deadline,
            cancel_requested=lambda: cancel_at is not None and time.monotonic() >= cancel_at,
            poll_interval=0.05,
            kill_grace=0.5,
        )
        ended = run_step(
            SH,
            cwd=self.folder,
            env=self.env,
            output=LineSplitter(self.log, "step"),
            limits=limits,
            args=["-c", script],
        )
        lines = [line.split(" | step | ", 1)[1] for line in self.log.tail()[before:]]
        return ended, lines


@pytest.fixture
def steps(tmp_path: Path) -> Iterator[Steps]:
    folder = tmp_path / "step"
    folder.mkdir()
    runner = Steps(folder)
    yield runner
    runner.log.close()


def stop_zygote() -> None:
    """Kill this process's zygote (if any) and wait until it is reaped."""
    pid = forkserver.zygote_pid()
    if pid is not None:
        os.kill(pid, signal.SIGKILL)
        wait_until(lambda: forkserver.zygote_pid() is None, 5, "the zygote to be reaped")


@pytest.fixture
def no_zygote(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every step starts its reaper directly: the zygote's script cannot be found."""
    stop_zygote()
    monkeypatch.setattr(forkserver, "ZYGOTE", Path("/nonexistent/zygote.py"))
    yield
    stop_zygote()


def parent_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def cmdline(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_text().split("\0")


def who(lines: list[str]) -> dict[str, list[str]]:
    """The step's answers to WHO_AM_I by their first word."""
    return {line.split()[0]: line.split()[1:] for line in lines if line}


def open_files(steps: Steps) -> list[str]:
    """The descriptors a step's program starts with (``ls``'s own folder left out)."""
    ended, lines = steps.run("exec ls -1 -U /proc/self/fd")
    assert ended.outcome is StepOutcome.OK
    return sorted(lines, key=int)[:-1]


def zombies_of(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] == "Z" and int(fields[1]) == pid:
            found.append(int(entry))
    return found


def test_a_step_runs_under_a_reaper_forked_by_the_zygote(steps: Steps) -> None:
    ended, lines = steps.run(WHO_AM_I)

    assert ended == StepExit(StepOutcome.OK, 0)
    answers = who(lines)
    zygote = forkserver.zygote_pid()
    assert zygote is not None
    reaper = int(answers["reaper"][0])
    assert answers["reaper"][1:] == ["parent", str(zygote)]
    assert parent_of(zygote) == os.getpid()
    assert any(word.endswith("zygote.py") for word in cmdline(zygote))
    assert Path(f"/proc/{zygote}/environ").read_bytes() == b""  # not the worker's credentials
    # the step is in the reaper's own session and group
    assert answers["group"] == [str(reaper), "session", str(reaper)]
    assert answers["stdin"] == ["/dev/null"]
    assert answers["cwd"] == [str(steps.folder)]
    assert answers["env"] == sorted(f"{k}={v}" for k, v in steps.env.items())
    assert "to stderr" in lines
    assert open_files(steps) == ["0", "1", "2"]  # not the status pipe, nothing of the zygote
    # the next step uses the same zygote
    assert who(steps.run(WHO_AM_I)[1])["reaper"][1:] == ["parent", str(zygote)]


def test_the_direct_start_runs_the_same_step(steps: Steps, no_zygote: None) -> None:
    ended, lines = steps.run(WHO_AM_I)

    assert ended == StepExit(StepOutcome.OK, 0)
    answers = who(lines)
    reaper = int(answers["reaper"][0])
    assert answers["reaper"][1:] == ["parent", str(os.getpid())]
    assert answers["group"] == [str(reaper), "session", str(reaper)]
    assert answers["stdin"] == ["/dev/null"]
    assert answers["cwd"] == [str(steps.folder)]
    assert "to stderr" in lines
    assert open_files(steps) == ["0", "1", "2"]
    assert forkserver.zygote_pid() is None


ENDINGS = [
    ("echo out; exit 0", StepExit(StepOutcome.OK, 0)),
    ("echo out; exit 3", StepExit(StepOutcome.FAILED, 3)),
    ("exit 137", StepExit(StepOutcome.FAILED, 137)),  # an exit code, not a SIGKILL
    ("kill -TERM $$", StepExit(StepOutcome.FAILED, -15)),
    ("kill -KILL $$", StepExit(StepOutcome.FAILED, -9)),
    ("exec /nonexistent/program", StepExit(StepOutcome.FAILED, 127)),
    ("printf 'no newline'", StepExit(StepOutcome.OK, 0)),
]


@pytest.mark.parametrize("path", ["zygote", "direct"])
def test_exit_codes_signals_and_output_are_the_same_on_both_paths(
    steps: Steps, path: str, request: pytest.FixtureRequest
) -> None:
    if path == "direct":
        request.getfixturevalue("no_zygote")
    for script, expected in ENDINGS:
        ended, lines = steps.run(script)
        assert ended == expected, script
        if script.startswith("echo out"):
            assert lines == ["out"]
    assert steps.run("printf 'no newline'")[1] == ["no newline"]


@pytest.mark.parametrize("path", ["zygote", "direct"])
def test_timeout_and_cancel_kill_the_tree_on_both_paths(
    steps: Steps, path: str, request: pytest.FixtureRequest
) -> None:
    if path == "direct":
        request.getfixturevalue("no_zygote")
    pids = steps.folder / "pids"
    for limit in ("deadline", "cancel"):
        pids.unlink(missing_ok=True)
        started = time.monotonic()
        if limit == "deadline":
            ended, lines = steps.run(LEFTOVERS + "sleep 30", deadline=started + 1.0)
            assert ended == StepExit(StepOutcome.TIMED_OUT, None)
        else:
            ended, lines = steps.run(LEFTOVERS + "sleep 30", cancel_after=1.0)
            assert ended == StepExit(StepOutcome.ABORTED, None)
        assert time.monotonic() - started < 3.0
        assert "leftovers started" in lines
        leftovers = read_pids(pids)
        assert len(leftovers) == 3
        assert [pid for pid in leftovers if is_alive(pid)] == []


def test_a_zygote_killed_between_steps_is_replaced(steps: Steps) -> None:
    steps.run("true")
    first = forkserver.zygote_pid()
    assert first is not None

    os.kill(first, signal.SIGKILL)
    wait_until(lambda: not is_alive(first), 5, "the zygote to die")
    ended, lines = steps.run("echo after")  # the old one's death is seen, or the request fails

    assert ended == StepExit(StepOutcome.OK, 0)
    assert lines == ["after"]
    answers = who(steps.run(WHO_AM_I)[1])
    second = forkserver.zygote_pid()
    assert second is not None and second != first
    assert answers["reaper"][1:] == ["parent", str(second)]


def test_a_hung_zygote_is_replaced_and_the_step_starts_directly(
    steps: Steps, monkeypatch: pytest.MonkeyPatch
) -> None:
    steps.run("true")
    hung = forkserver.zygote_pid()
    assert hung is not None
    monkeypatch.setattr(forkserver, "REPLY_TIMEOUT", 0.5)
    os.kill(hung, signal.SIGSTOP)

    ended, lines = steps.run(WHO_AM_I)

    assert ended == StepExit(StepOutcome.OK, 0)
    assert who(lines)["reaper"][1:] == ["parent", str(os.getpid())]  # started directly
    wait_until(lambda: not is_alive(hung), 5, "the hung zygote to be killed")
    answers = who(steps.run(WHO_AM_I)[1])
    assert answers["reaper"][1:] == ["parent", str(forkserver.zygote_pid())]
    assert forkserver.zygote_pid() not in (None, hung)


def test_a_zygote_that_cannot_start_is_logged_once(
    steps: Steps, no_zygote: None, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(forkserver.client(), "failed_before", False)
    with caplog.at_level(logging.DEBUG, logger=forkserver.__name__):
        results = [steps.run("echo fine") for _ in range(3)]

    assert results == [(StepExit(StepOutcome.OK, 0), ["fine"])] * 3
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, caplog.text
    assert "the step starts its reaper directly" in warnings[0].getMessage()


def test_a_forked_process_starts_its_own_zygote(steps: Steps) -> None:
    steps.run("true")
    ours = forkserver.zygote_pid()
    assert ours is not None
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover (the child reports through the pipe)
        code = 1
        try:
            os.close(read_end)
            lines = steps.run(WHO_AM_I)[1]
            zygote = forkserver.zygote_pid()
            os.write(write_end, f"{who(lines)['reaper'][2]} {zygote}\n".encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write_end)
    with os.fdopen(read_end) as report:
        reaper_parent, theirs = report.read().split()
    _, status = os.waitpid(child, 0)

    assert os.waitstatus_to_exitcode(status) == 0
    assert reaper_parent == theirs
    assert int(theirs) != ours
    wait_until(lambda: not is_alive(int(theirs)), 5, "the child's zygote to die with it")
    # ours still serves us (the child closed only its copy of the socket)
    assert who(steps.run(WHO_AM_I)[1])["reaper"][1:] == ["parent", str(ours)]
    assert forkserver.zygote_pid() == ours


def test_steps_from_several_threads_share_the_zygote(steps: Steps) -> None:
    parents: list[str] = []
    errors: list[BaseException] = []

    def worker(number: int) -> None:
        folder = steps.folder / f"thread-{number}"
        folder.mkdir()
        own = Steps(folder)  # a log of its own
        try:
            for round_ in range(5):
                ended, lines = own.run(f"echo {number}-{round_}; cut -d' ' -f4 /proc/$PPID/stat")
                assert ended == StepExit(StepOutcome.OK, 0)
                assert lines[0] == f"{number}-{round_}"
                parents.append(lines[1])
        except BaseException as exc:
            errors.append(exc)
        finally:
            own.log.close()

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)

    assert errors == []
    assert len(parents) == 20
    assert set(parents) == {str(forkserver.zygote_pid())}


def test_the_zygote_outlives_the_thread_that_started_it(steps: Steps) -> None:
    stop_zygote()
    thread = threading.Thread(target=steps.run, args=("true",))
    thread.start()
    thread.join(30)
    zygote = forkserver.zygote_pid()
    assert zygote is not None

    time.sleep(0.2)  # a parent-death signal tied to that thread would have fired
    assert is_alive(zygote)
    assert who(steps.run(WHO_AM_I)[1])["reaper"][1:] == ["parent", str(zygote)]


def test_an_environment_no_program_can_take_is_refused_as_popen_refuses_it() -> None:
    with pytest.raises(ValueError, match="illegal environment variable name"):
        forkserver.encode_request(["/bin/true"], {"A=B": "c"}, 1.0)
    with pytest.raises(ValueError, match="embedded null byte"):
        forkserver.encode_request(["/bin/true", "a\0b"], {}, 1.0)
    body = b"0.5\x001\x00/bin/true\x00A=b=c"  # grace, argc, argv, environment
    assert forkserver.encode_request(["/bin/true"], {"A": "b=c"}, 0.5) == b"\0\0\0\x15" + body


def test_many_steps_leave_no_zombie_and_no_open_file(steps: Steps) -> None:
    steps.run("true")
    zygote = forkserver.zygote_pid()
    assert zygote is not None
    ours_before = sorted(os.listdir("/proc/self/fd"))
    zygote_before = sorted(os.listdir(f"/proc/{zygote}/fd"))

    for number in range(40):
        ended, _ = steps.run("exit 1" if number % 4 == 0 else "sleep 0 &")
        assert ended.outcome is (StepOutcome.FAILED if number % 4 == 0 else StepOutcome.OK)

    assert forkserver.zygote_pid() == zygote
    assert sorted(os.listdir(f"/proc/{zygote}/fd")) == zygote_before
    assert sorted(os.listdir("/proc/self/fd")) == ours_before
    assert zombies_of(zygote) == []
    assert zombies_of(os.getpid()) == []


def test_the_zygote_makes_a_build_s_namespaces_and_refuses_a_map_the_kernel_refuses() -> None:
    """A user namespace whose 1000 is the given host uid, closed to nesting, and a network
    namespace of its own; a map the kernel refuses is no namespace, and the zygote goes on."""
    if os.geteuid() != 0:
        pytest.fail("the executor's namespaces are made as root, as CI runs")
    before = forkserver.zygote_pid()
    fds = forkserver.build_namespaces(1000, (1 << 30) + 12345, network=True)
    try:
        assert [os.readlink(f"/proc/self/fd/{fd}")[:5] for fd in fds] == ["user:", "net:["]
        assert all(not os.get_inheritable(fd) for fd in fds)
    finally:
        for fd in fds:
            os.close(fd)
    assert len(forkserver.build_namespaces(1000, (1 << 30) + 1, network=False)) == 1
    assert forkserver.build_namespaces(1000, (1 << 32) - 1, network=True) == []  # no such uid
    assert forkserver.zygote_pid() == (before or forkserver.zygote_pid())
