"""An sshd of our own: what a local node runs, and what the tests log in to.

:func:`write_sshd_folder` makes a folder with a host key, an
``authorized_keys`` holding the node key's public half and an
``sshd_config`` that lets only that key in (root included, no password,
no PAM); :func:`sshd_argv` is the command that runs it in the foreground
(``-D -e``: its log goes to stderr). The caller decides where it runs: a
local node's launcher in the node's network namespace and sandbox, a test
on a free port of 127.0.0.1.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from scheduler.errors import SluiceError

SSHD = "/usr/sbin/sshd"


class SshdError(SluiceError):
    """sshd cannot be set up (not installed, no host key)."""


def sshd_path() -> str:
    if os.access(SSHD, os.X_OK):
        return SSHD
    found = shutil.which("sshd")
    if found is None:
        raise SshdError("sshd is not installed (Debian: openssh-server)")
    return found


def write_sshd_folder(
    folder: Path,
    authorized_keys: Sequence[str],
    *,
    listen: str = "0.0.0.0",
    port: int = 22,
    seen_as: Path | None = None,
) -> Path:
    """Host key, ``authorized_keys`` and ``sshd_config`` in ``folder``; the config's path.

    ``seen_as`` is the folder's path as the sshd sees it (a local node's
    sandbox binds it elsewhere); the config names its files there.
    """
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    host_key = folder / "ssh_host_ed25519_key"
    if not host_key.exists():
        try:
            subprocess.run(
                ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(host_key)],
                check=True, capture_output=True, text=True,
            )  # fmt: skip
        except (OSError, subprocess.CalledProcessError) as exc:
            detail = getattr(exc, "stderr", "") or str(exc)
            raise SshdError(f"making the host key in {folder}: {detail.strip()}") from exc
    keys = folder / "authorized_keys"
    keys.write_text("".join(f"{key.strip()}\n" for key in authorized_keys))
    keys.chmod(0o600)
    config = folder / "sshd_config"
    inside = seen_as or folder
    config.write_text(
        "\n".join(
            [
                f"ListenAddress {listen}",
                f"Port {port}",
                f"HostKey {inside / host_key.name}",
                f"AuthorizedKeysFile {inside / keys.name}",
                f"PidFile {inside / 'sshd.pid'}",
                "PermitRootLogin prohibit-password",
                "PasswordAuthentication no",
                "KbdInteractiveAuthentication no",
                "UsePAM no",
                # the key file lives in a folder of ours, not the user's ~/.ssh
                "StrictModes no",
                "AllowAgentForwarding no",
                "AllowTcpForwarding no",
                "X11Forwarding no",
                "PrintMotd no",
                "UseDNS no",
                "LogLevel INFO",
                "Subsystem sftp internal-sftp",
                "",
            ]
        )
    )
    # sshd refuses to start without its privilege separation folder
    try:
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
    except OSError as exc:
        raise SshdError(f"sshd needs /run/sshd: {exc.strerror} (run as root)") from exc
    return config


def sshd_argv(config: Path) -> list[str]:
    """Run the sshd of ``config`` in the foreground, logging to stderr."""
    return [sshd_path(), "-D", "-e", "-f", str(config)]
