"""The bubblewrap prefix: own build writable, state dir hidden, secret files read empty."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from scheduler.settings import load_settings
from workers.executor import sandbox
from workers.executor.sandbox import bwrap_prefix
from workers.executor.service import secret_files
from workers.executor.workspace import BuildLayout, create_folders


@pytest.fixture
def secret() -> Iterator[Path]:
    if shutil.which("bwrap") is None:
        pytest.fail("bubblewrap is not installed (make bootstrap installs it)")
    path = Path("/var/tmp") / f"sluice-test-key-{uuid.uuid4().hex}"  # outside /tmp
    path.write_text("PRIVATE KEY\n")
    yield path
    path.unlink()


def run(prefix: list[str], *command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*prefix, *command], capture_output=True, text=True, timeout=30, check=False
    )


def test_secret_files_read_empty_and_only_the_build_is_writable(
    tmp_path: Path, secret: Path
) -> None:
    state = tmp_path / "state"
    layout = BuildLayout.for_build(state, "b1")
    create_folders(layout)
    other = BuildLayout.for_build(state, "b2")
    create_folders(other)
    (other.root / "theirs.txt").write_text("theirs\n")
    prefix = bwrap_prefix(layout, state, hidden=[secret])
    assert run(prefix, "/bin/cat", str(secret)).stdout == ""
    assert run([], "/bin/cat", str(secret)).stdout == "PRIVATE KEY\n"  # outside, it is there
    assert run(prefix, "/bin/cat", str(other.root / "theirs.txt")).returncode != 0
    mine = layout.root / "home" / "mine.txt"
    assert run(prefix, "/bin/sh", "-c", f"echo mine > {mine}").returncode == 0
    assert mine.read_text() == "mine\n"
    assert run(prefix, "/bin/sh", "-c", f"echo x > {secret}").returncode != 0
    assert secret.read_text() == "PRIVATE KEY\n"


def test_passwords_and_keys_the_settings_name_are_hidden_from_jobs(tmp_path: Path) -> None:
    """``secret_files``: what a sandboxed job reads as empty (sluice.yaml, the files it names)."""
    for name in ("keystore.password", "broker.password", "flower.users"):
        (tmp_path / name).write_text("hunter2\n")
    config = tmp_path / "sluice.yaml"
    config.write_text(
        "keystore:\n"
        "  password_file: keystore.password\n"
        "broker:\n"
        "  password_file: broker.password\n"
        "flower:\n"
        "  basic_auth_file: flower.users\n"
        "zookeeper:\n"
        "  hosts: 127.0.0.1:2281\n"
        "  tls:\n"
        f"    ca: {tmp_path / 'ca.pem'}\n"
        f"    cert: {tmp_path / 'client.pem'}\n"
        f"    key: {tmp_path / 'client.key'}\n"
    )
    hidden = {p.resolve() for p in secret_files(load_settings(config, environ={}))}
    wanted = {"sluice.yaml", "keystore.password", "ca.pem", "client.pem", "client.key"}
    wanted |= {"broker.password", "flower.users"}
    assert {tmp_path / name for name in wanted} <= hidden


def test_an_installation_under_tmp_stays_readable_and_its_state_dir_hidden(
    monkeypatch: pytest.MonkeyPatch, secret: Path
) -> None:
    """A CI checkout in /tmp: the job's own /tmp is empty, but ansible-playbook runs from it."""
    checkout = Path(tempfile.mkdtemp(prefix="sluice-checkout-", dir="/tmp"))
    try:
        (checkout / "venv" / "bin").mkdir(parents=True)
        tool = checkout / "venv" / "bin" / "tool"
        tool.write_text("#!/bin/sh\necho tool ran\n")
        tool.chmod(0o755)
        state = checkout / ".state"
        layout = BuildLayout.for_build(state, "b1")
        create_folders(layout)
        (state / "sluice.sqlite").write_text("history\n")
        monkeypatch.setattr(sandbox, "installation", lambda: (checkout / "venv", checkout))
        prefix = bwrap_prefix(layout, state, hidden=[secret])
        assert run(prefix, str(tool)).stdout == "tool ran\n"
        assert run(prefix, "/bin/cat", str(state / "sluice.sqlite")).returncode != 0
        assert run(prefix, "/bin/sh", "-c", f"echo x > {checkout}/new").returncode != 0
        assert run(prefix, "/bin/ls", "/tmp").stdout.split() == [checkout.name]
    finally:
        shutil.rmtree(checkout)


def test_the_installation_is_the_running_virtualenv_and_source() -> None:
    venv, source = sandbox.installation()
    assert (venv / "bin" / "ansible-playbook").exists()
    assert (source / "workers" / "executor" / "sandbox.py").exists()


def test_a_build_dir_on_a_shared_tmpfs_is_private_and_hides_other_builds() -> None:
    """``executor.build_dir`` under /dev/shm: the folder is 0700, other workspaces hidden."""
    shm = Path(tempfile.mkdtemp(prefix="sluice-test-", dir="/dev/shm"))
    try:
        state, builds = shm / "state", shm / "builds"
        layout = BuildLayout.for_build(state, "b1", builds)
        assert layout.root == builds / "b1" and layout.log_dir == state / "logs" / "b1"
        create_folders(layout)
        assert builds.stat().st_mode & 0o777 == 0o700
        other = BuildLayout.for_build(state, "b2", builds)
        create_folders(other)
        (other.root / "theirs.txt").write_text("theirs\n")
        prefix = bwrap_prefix(layout, state, builds=builds)
        assert run(prefix, "/bin/cat", str(other.root / "theirs.txt")).returncode != 0
        assert run(prefix, "/bin/ls", str(builds)).stdout.split() == ["b1"]
        mine = layout.root / "home" / "mine.txt"
        assert run(prefix, "/bin/sh", "-c", f"echo mine > {mine}").returncode == 0
        assert mine.read_text() == "mine\n"
    finally:
        shutil.rmtree(shm)


# A parent that is a child subreaper (as init is for the worker) runs sandboxed
# steps under the reaper one after the other, then counts the processes the
# reapers left to it: bubblewrap's PID namespace init outlives bwrap's monitor
# by a moment, and a reaper that exits before reaping it hands it to init.
ORPHANS = """
import ctypes, os, sys
ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
from workers.executor import reaper
argv = sys.argv[2:]
for _ in range(int(sys.argv[1])):
    status_read, status_write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(status_read)
        os._exit(reaper.run(1.0, os.getppid(), status_write, argv, {"PATH": os.defpath}))
    os.close(status_write)
    assert os.read(status_read, 100) == b"exit 0\\n"
    os.waitpid(pid, 0)
    os.close(status_read)
orphans = []
while True:
    try:
        pid, _status = os.waitpid(-1, os.WNOHANG)
    except ChildProcessError:
        break
    if pid == 0:
        break
    orphans.append(pid)
print(len(orphans))
"""


def test_a_sandboxed_step_leaves_no_process_to_init(tmp_path: Path) -> None:
    """The reaper reaps bubblewrap's namespace init too before it exits.

    Left over, it was a zombie for init to collect (an init that never
    reaps, as in a container, would gather one for every fourth step).
    """
    layout = BuildLayout.for_build(tmp_path / "state", "b1")
    create_folders(layout)
    prefix = bwrap_prefix(layout, tmp_path / "state")
    script = tmp_path / "orphans.py"
    script.write_text(ORPHANS)
    ran = subprocess.run(
        [sys.executable, str(script), "40", *prefix, "/bin/true"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).resolve().parents[2],
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
        check=False,
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.split() == ["0"]
