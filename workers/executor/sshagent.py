"""One ``ssh-agent`` per build: playbooks log in to nodes without reading the key.

The agent holds the deployment's node key (``nodes.ssh_key``,
:mod:`workers.nodekey`); the job gets only ``SSH_AUTH_SOCK``. The agent
runs in the foreground (``-D``) as a child of the worker, so stopping it is
a signal to a process we hold, and :meth:`SshAgent.stop` is safe to call
whatever state the agent is in. A worker killed with SIGKILL leaves its
agents behind (they hold nothing but a key the host already has).

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
import subprocess
import tempfile
import time
from pathlib import Path

from workers.executor.errors import WorkspaceError

# How long the agent may take to create its socket.
START_TIMEOUT = 10.0


class SshAgent:
    """A running ``ssh-agent`` with the node key added; :meth:`stop` ends it."""

    def __init__(self, folder: Path, process: subprocess.Popen[bytes]) -> None:
        self.folder = folder
        self.socket = folder / "agent.sock"
        self.process = process

    @classmethod
    def start(cls, folder: Path, key: Path) -> SshAgent:
        """Start an agent with its socket in ``folder`` and add ``key``.

        Raises :class:`WorkspaceError` (the build is retried) when the agent
        cannot start or refuses the key; the agent is stopped then.
        """
        argv = ["ssh-agent", "-D", "-a", str(folder / "agent.sock")]
        try:
            process = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
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
        """End the agent (SIGTERM, then SIGKILL) and reap it."""
        with contextlib.suppress(ProcessLookupError):
            self.process.terminate()
        try:
            self.process.wait(timeout=2)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        if self.process.stderr is not None:
            self.process.stderr.close()


def make_socket_folder() -> Path:
    """A private folder with a short path for the build's sockets (agent, SSH masters)."""
    # /tmp, not $TMPDIR: short whatever the environment, and never under the state dir
    return Path(tempfile.mkdtemp(prefix="sluice-ssh-", dir="/tmp"))


def remove_socket_folder(folder: Path) -> None:
    shutil.rmtree(folder, ignore_errors=True)
