"""One ``ssh-agent`` per build: playbooks log in to nodes without reading the key.

The agent holds the deployment's node key (``nodes.ssh_key``,
:mod:`workers.nodekey`); the job gets only ``SSH_AUTH_SOCK``. The agent
runs in the foreground (``-D``) under the step reaper (``reaper.py``), in a
session of its own, so:

* :meth:`SshAgent.stop` is a SIGTERM to a process we hold (the reaper ends
  the agent, then itself; SIGKILL to the group if it does not), safe to
  call whatever state the agent is in;
* the agent dies with the thread that started it, even when the worker is
  killed with SIGKILL: the reaper gets SIGTERM from the kernel
  (``PR_SET_PDEATHSIG``) and ends the agent. The agent itself cannot carry
  that signal: ``ssh-agent`` is set-group-id on Debian, and the kernel
  clears a parent-death signal when such a program is executed. What a
  killed worker leaves is the empty sockets folder (the agent removes its
  socket as it exits).

The socket lives in a short folder of its own under the system's temporary
folder, not in the workspace: a Unix socket's path must stay below 108
bytes, which a workspace under a deep ``state_dir`` passes easily. The
sandbox binds that folder in (:mod:`workers.executor.sandbox`'s
``writable``), so a sandboxed playbook reaches the agent at the same path.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from workers.executor.errors import WorkspaceError
from workers.executor.process import reaper_argv

# How long the agent may take to create its socket.
START_TIMEOUT = 10.0
# Seconds the reaper gives the agent between SIGTERM and SIGKILL.
STOP_GRACE = 1.0


class SshAgent:
    """A running ``ssh-agent`` with the node key added; :meth:`stop` ends it."""

    def __init__(self, folder: Path, process: subprocess.Popen[bytes]) -> None:
        self.folder = folder
        self.socket = folder / "agent.sock"
        # the reaper that runs the agent
        self.process = process

    @classmethod
    def start(cls, folder: Path, key: Path, uid: int | None = None) -> SshAgent:
        """Start an agent with its socket in ``folder`` and add ``key``.

        ``uid`` is the host uid of the build's sandboxed job (None: the
        worker's): ssh-agent answers only its own user (and root), so it
        runs as the job's user; the key is added by this process.

        Raises :class:`WorkspaceError` (the build is retried) when the agent
        cannot start or refuses the key; the agent is stopped then.
        """
        program = shutil.which("ssh-agent")
        if program is None:
            raise WorkspaceError("ssh-agent is not installed (Debian: openssh-client)")
        try:
            process = _under_reaper([program, "-D", "-a", str(folder / "agent.sock")], uid)
        except OSError as exc:
            raise WorkspaceError(f"cannot start ssh-agent: {exc}") from None
        agent = cls(folder, process)
        try:
            agent._wait_for_socket()
            agent._add(key)
        except BaseException:
            agent.stop()
            raise
        return agent

    def _wait_for_socket(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while not self.socket.exists():
            if self.process.poll() is not None:
                error = self.process.stderr.read() if self.process.stderr else b""
                raise WorkspaceError(f"ssh-agent exited: {error.decode(errors='replace').strip()}")
            if time.monotonic() > deadline:
                raise WorkspaceError(f"ssh-agent made no socket in {START_TIMEOUT:.0f}s")
            time.sleep(0.01)

    def _add(self, key: Path) -> None:
        env = {"SSH_AUTH_SOCK": str(self.socket), "PATH": os.environ.get("PATH", os.defpath)}
        try:
            done = subprocess.run(
                ["ssh-add", "-q", str(key)],
                env=env,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=START_TIMEOUT,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise WorkspaceError(f"ssh-add {key}: {exc}") from None
        if done.returncode != 0:
            detail = (done.stderr or done.stdout).strip()
            raise WorkspaceError(f"ssh-add {key} failed: {detail}")

    def stop(self) -> None:
        """End the agent and its reaper (SIGTERM, then SIGKILL to the group) and reap them."""
        with contextlib.suppress(ProcessLookupError):
            self.process.terminate()
        try:
            self.process.wait(timeout=STOP_GRACE + 2)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        if self.process.stderr is not None:
            self.process.stderr.close()


def _under_reaper(argv: list[str], uid: int | None = None) -> subprocess.Popen[bytes]:
    """Start ``argv`` under the step reaper, which ends it when this thread dies.

    With ``uid``, the program runs as that user and group with no others
    (``setpriv``, util-linux); the reaper stays the worker's, so it runs
    from an installation only the worker may read (a virtualenv under a
    closed folder). The reaper's status line (how the agent ended) goes to
    ``/dev/null``: nothing waits for it, :meth:`SshAgent.stop` only needs
    the reaper gone.
    """
    if uid is not None:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            raise OSError("setpriv is not installed (Debian: util-linux)")
        argv = [setpriv, f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--", *argv]
    status = os.open(os.devnull, os.O_WRONLY)
    try:
        return subprocess.Popen(
            reaper_argv(argv, STOP_GRACE, status),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
            close_fds=True,
            pass_fds=(status,),
        )
    finally:
        os.close(status)


def make_socket_folder() -> Path:
    """A private folder with a short path for the build's sockets (agent, SSH masters)."""
    # /tmp, not $TMPDIR: short whatever the environment, and never under the state dir
    return Path(tempfile.mkdtemp(prefix="sluice-ssh-", dir="/tmp"))


def remove_socket_folder(folder: Path) -> None:
    shutil.rmtree(folder, ignore_errors=True)
