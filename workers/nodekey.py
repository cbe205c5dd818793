"""The SSH key pair executors log in to nodes with (``nodes.ssh_key``).

One key pair per deployment, as Zuul's ``executor.private_key_file``: every
executor adds the private key to its build's ``ssh-agent`` (the job never
reads the file), a local node's sshd trusts the ``.pub`` beside it, and an
operator puts that public key in ``authorized_keys`` on every static host
(``sluice nodes pubkey`` prints it). Deployments with several hosts give
each executor and launcher the same pair (a path in ``sluice.yaml``); one
host makes it on first use.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from scheduler.errors import SluiceError
from scheduler.settings.sections import Settings

KEY_NAME = "nodes_ed25519"


class NodeKeyError(SluiceError):
    """The node key cannot be read or made."""


def node_key_path(settings: Settings) -> Path:
    """Where the private key is (``nodes.ssh_key`` or ``<state_dir>/ssh/nodes_ed25519``)."""
    configured = settings.nodes.ssh_key
    return configured if configured is not None else Path(settings.state_dir) / "ssh" / KEY_NAME


def ensure_node_key(path: Path) -> Path:
    """The private key at ``path``, made (ed25519, no passphrase) when missing.

    Its public half is ``path`` + ``.pub``. Two processes making it at once
    both end with the same pair: the key is written to a temporary name and
    linked into place, and the loser reads the winner's.
    """
    public = path.with_name(path.name + ".pub")
    if path.exists() and public.exists():
        return path
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        temporary = path.with_name(f".{path.name}.{os.getpid()}")
        for stale in (temporary, temporary.with_name(temporary.name + ".pub")):
            stale.unlink(missing_ok=True)
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "sluice-nodes",
             "-f", str(temporary)],
            check=True, capture_output=True, text=True,
        )  # fmt: skip
        try:
            os.link(temporary, path)
            os.link(temporary.with_name(temporary.name + ".pub"), public)
        except FileExistsError:
            pass  # another process made it first: keep theirs
        finally:
            temporary.unlink(missing_ok=True)
            temporary.with_name(temporary.name + ".pub").unlink(missing_ok=True)
    except FileNotFoundError as exc:
        raise NodeKeyError(f"making the node key {path}: ssh-keygen is not installed") from exc
    except (OSError, subprocess.CalledProcessError) as exc:
        detail = getattr(exc, "stderr", "") or str(exc)
        raise NodeKeyError(f"making the node key {path}: {detail.strip()}") from exc
    for _ in range(50):  # the winner links its public half just after
        if public.exists():
            return path
        time.sleep(0.02)
    if not public.exists():
        raise NodeKeyError(f"the node key {path} has no public half {public}")
    return path


def public_key(path: Path) -> str:
    """The public key line of the pair whose private half is ``path``."""
    public = path.with_name(path.name + ".pub")
    try:
        return public.read_text().strip()
    except OSError as exc:
        raise NodeKeyError(f"reading the node public key {public}: {exc.strerror}") from exc
