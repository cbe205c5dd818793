"""The sshd that local nodes run and the tests log in to (workers/launcher/sshd.py)."""

from __future__ import annotations

from pathlib import Path

from tests.fixtures.sshd import SshHost
from workers.nodekey import ensure_node_key


def test_the_node_key_logs_in_as_root(ssh_host: SshHost) -> None:
    out = ssh_host.ssh("echo hello; id -u")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["hello", "0"]


def test_another_key_is_refused(ssh_host: SshHost, tmp_path: Path) -> None:
    other = ensure_node_key(tmp_path / "other" / "key")
    stranger = SshHost(ssh_host.host, ssh_host.port, "root", other, ssh_host.log)
    out = stranger.ssh("true")
    assert out.returncode == 255
    assert "Permission denied" in out.stderr
