"""Booting a local node: a network namespace, a sandbox on the node's root, an sshd.

:func:`boot_node` turns a copied image root (``<node_dir>/<id>/root``) into
a machine a job can SSH into, in named steps:

1. **Lease** a /30 and the names that go with it
   (:mod:`workers.launcher.addresses`), recorded in ``<folder>/boot.json``.
2. **Network**: the namespace ``sluice-node-<hex>`` with ``lo`` and
   ``eth0`` (the node's address, a default route to the host's end), and
   the veth's host end ``sl<hex>`` with the first address, in the
   launcher's own namespace.
3. **Furnish the root**: ``/root`` (root's home) and ``/tmp``; the host's
   ``/etc/passwd`` and ``/etc/group`` when the image has none, and the
   host's ``sshd`` user added when the image's lack it (sshd needs it).
4. **Start the sshd** (:mod:`workers.launcher.sshd`, trusting the node
   key's public half) in the namespace, inside a bubblewrap whose ``/`` is
   the node's root (writable) with the host's ``/usr`` read-only (and
   ``/bin``, ``/lib*``, ``/sbin`` as the host has them, unless the image
   has its own), a fresh ``/proc``, ``/dev``, ``/run``, and its own PID,
   IPC and UTS namespaces (the hostname ``node-<id>``). It is a daemon of
   the node, not of the launcher: started through a double fork in a
   session of its own, it outlives the task and the worker that booted it.
   Its pid is in ``<folder>/node.pid``, its log in ``<folder>/sshd.log``.
5. **Wait** until the sshd accepts a TCP connection on the node's address.

A boot that fails removes what it made (:func:`shutdown_node`) and raises
:class:`LaunchError` with the reason (not root, no ``bwrap``, no sshd, no
free address, an sshd that exits).

:func:`shutdown_node` is the opposite, and works from what is on disk
(``boot.json``, or the lease naming the folder), so it cleans up a node
whose launcher died at any step: every process in the namespace is killed
(the sshd, its sessions, whatever a job left running), the namespace and
the veth deleted, the lease freed. The caller removes the folder.

Everything here needs root (network namespaces, bubblewrap as root, an
sshd that changes user).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scheduler import testhooks
from scheduler.errors import SluiceError
from workers.launcher.addresses import AddressPool, Lease, ip, read_lease, remove_netns
from workers.launcher.errors import LaunchError
from workers.launcher.sshd import sshd_argv, write_sshd_folder

BOOT_FILE = "boot.json"
PID_FILE = "node.pid"
LOG_FILE = "sshd.log"
SSHD_FOLDER = "sshd"
# where the sandbox shows the sshd's folder (outside the node's root, on the host)
SSHD_INSIDE = Path("/run/sluice-sshd")
SSH_PORT = 22
LOGIN_USER = "root"
# top-level names a merged-/usr host has as links into /usr (or as folders)
USR_NAMES = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
BOOT_TIMEOUT = 30.0

# The daemon's first parent: forks, prints the child's pid, exits; the child
# starts a session of its own and becomes the sandbox (so init adopts it).
DAEMONIZE = """\
import os, sys
pid = os.fork()
if pid:
    print(pid, flush=True)
    os._exit(0)
os.setsid()
os.dup2(2, 1)
os.execvp(sys.argv[1], sys.argv[1:])
"""


@dataclass(frozen=True)
class BootedNode:
    """A running local node: its lease (address, names) and its daemon's pid."""

    lease: Lease
    pid: int

    def connection(self) -> dict[str, Any]:
        """What SSH needs, and what cleanup reads."""
        return {
            "host": self.lease.node_address,
            "port": SSH_PORT,
            "username": LOGIN_USER,
            "netns": self.lease.netns,
        }


def boot_node(
    folder: Path,
    root: Path,
    authorized_keys: Sequence[str],
    pool: AddressPool,
    *,
    hostname: str,
    timeout: float = BOOT_TIMEOUT,
) -> BootedNode:
    """Boot the node of ``folder`` from its copied ``root`` (see the module's docstring)."""
    _require_tools()
    try:
        lease = pool.lease(folder)
        (folder / BOOT_FILE).write_text(json.dumps(lease.to_dict()) + "\n")
        _make_network(lease)
        testhooks.hold_boot()  # tests: a launcher killed with a half-booted node
        config = write_sshd_folder(
            folder / SSHD_FOLDER, authorized_keys, port=SSH_PORT, seen_as=SSHD_INSIDE
        )
        _furnish(root)
        argv = _sandbox_argv(lease, root, folder / SSHD_FOLDER, hostname, config)
        pid = _spawn_daemon(argv, folder / LOG_FILE)
        (folder / PID_FILE).write_text(f"{pid}\n")
        _wait_listening(lease.node_address, pid, folder / LOG_FILE, timeout)
    except (SluiceError, OSError, subprocess.SubprocessError) as exc:
        _undo(folder, pool, exc)
        raise LaunchError(f"booting {hostname}: {exc}") from exc
    except BaseException as exc:  # interrupted: still leave nothing behind
        _undo(folder, pool, exc)
        raise
    return BootedNode(lease, pid)


def _undo(folder: Path, pool: AddressPool, exc: BaseException) -> None:
    try:
        shutdown_node(folder, pool)
    except SluiceError as also:
        exc.add_note(f"and its cleanup failed: {also}")


def shutdown_node(folder: Path, pool: AddressPool) -> None:
    """Kill the node's processes, delete its namespace and veth, free its lease."""
    leases = [lease for lease in pool.leases() if lease.folder == folder]
    recorded = read_lease(folder / BOOT_FILE)
    if recorded is not None and recorded not in leases:
        leases.append(recorded)
    try:
        for lease in leases:
            remove_netns(lease.netns, lease.veth)
    except SluiceError as exc:
        raise LaunchError(f"shutting down the node in {folder}: {exc}") from exc
    pool.release(folder)
    (folder / PID_FILE).unlink(missing_ok=True)


def shutdown_all(node_dir: Path, pool: AddressPool) -> list[Path]:
    """Shut down every booted node whose folder is in ``node_dir``; their folders."""
    folders = sorted({lease.folder for lease in pool.leases() if lease.folder.parent == node_dir})
    for folder in folders:
        shutdown_node(folder, pool)
    return folders


def node_pid(folder: Path) -> int | None:
    """The pid of the node's daemon while it runs (None: not booted, or gone)."""
    try:
        pid = int((folder / PID_FILE).read_text())
    except (OSError, ValueError):
        return None
    return pid if _alive(pid) else None


def _require_tools() -> None:
    if os.geteuid() != 0:
        raise LaunchError("booting a local node needs root (network namespaces, bubblewrap)")
    for tool in ("ip", "bwrap"):
        if shutil.which(tool) is None:
            raise LaunchError(f"booting a local node needs {tool}, which is not installed")


def _make_network(lease: Lease) -> None:
    ip("netns", "add", lease.netns)
    inside = ("-n", lease.netns)
    ip("link", "add", lease.veth, "type", "veth", "peer", "name", "eth0", "netns", lease.netns)
    ip("addr", "add", f"{lease.host_address}/30", "dev", lease.veth)
    ip("link", "set", lease.veth, "up")
    ip(*inside, "addr", "add", f"{lease.node_address}/30", "dev", "eth0")
    ip(*inside, "link", "set", "eth0", "up")
    ip(*inside, "link", "set", "lo", "up")
    ip(*inside, "route", "add", "default", "via", lease.host_address)


def _furnish(root: Path) -> None:
    """What a login needs in the root: a home, /tmp, users (root and sshd)."""
    (root / "root").mkdir(mode=0o700, exist_ok=True)
    (root / "tmp").mkdir(exist_ok=True)
    (root / "tmp").chmod(0o1777)
    etc = root / "etc"
    etc.mkdir(exist_ok=True)
    for name in ("passwd", "group"):
        if not os.path.lexists(etc / name):
            shutil.copyfile(Path("/etc") / name, etc / name)
    sshd_user = _entry(Path("/etc/passwd"), 0, "sshd")
    if sshd_user is None:
        return
    _ensure_entry(etc / "passwd", 0, "sshd", sshd_user)
    gid = sshd_user.split(":")[3]
    sshd_group = _entry(Path("/etc/group"), 2, gid)
    if sshd_group is not None:
        _ensure_entry(etc / "group", 2, gid, sshd_group)


def _entry(path: Path, column: int, value: str) -> str | None:
    """The line of a colon-separated file (passwd, group) whose ``column`` is ``value``."""
    lines = path.read_text().splitlines()
    return next((x for x in lines if x.split(":")[column : column + 1] == [value]), None)


def _ensure_entry(path: Path, column: int, value: str, line: str) -> None:
    """Append ``line`` to the image's ``path`` unless it has the entry (never through a link)."""
    if path.is_symlink() or not path.is_file() or _entry(path, column, value) is not None:
        return
    text = path.read_text()
    path.write_text(text + ("\n" if text and not text.endswith("\n") else "") + line + "\n")


def _sandbox_argv(
    lease: Lease, root: Path, sshd_folder: Path, hostname: str, config: Path
) -> list[str]:
    argv = ["ip", "netns", "exec", lease.netns, "bwrap", "--bind", str(root), "/"]
    argv += ["--ro-bind", "/usr", "/usr"]
    for name in USR_NAMES:
        host = Path("/") / name
        if os.path.lexists(root / name) or not os.path.lexists(host):
            continue  # the image's own, or nothing to show
        if host.is_symlink():
            argv += ["--symlink", os.readlink(host), f"/{name}"]
        else:
            argv += ["--ro-bind", str(host), f"/{name}"]
    argv += ["--proc", "/proc", "--dev", "/dev", "--ro-bind", "/sys", "/sys"]
    argv += ["--tmpfs", "/run", "--perms", "0755", "--dir", "/run/sshd"]
    argv += ["--bind", str(sshd_folder), str(SSHD_INSIDE)]
    argv += ["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
    argv += ["--hostname", hostname, "--chdir", "/"]
    return [*argv, *sshd_argv(SSHD_INSIDE / config.name)]


def _spawn_daemon(argv: Sequence[str], log: Path) -> int:
    """Start ``argv`` as a daemon (a session of its own, adopted by init); its pid."""
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}
    with log.open("ab") as output:
        done = subprocess.run(
            [sys.executable, "-I", "-S", "-c", DAEMONIZE, *argv],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=output,
            env=env, timeout=30, check=False,
        )  # fmt: skip
    if done.returncode != 0 or not done.stdout.strip().isdigit():
        raise LaunchError(f"starting the node's sshd failed: {_tail(log)}")
    return int(done.stdout)


def _wait_listening(address: str, pid: int, log: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if not _alive(pid):
            raise LaunchError(f"the node's sshd exited: {_tail(log)}")
        try:
            with socket.create_connection((address, SSH_PORT), timeout=2):
                return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise LaunchError(f"the node's sshd does not listen after {timeout:.0f}s: {_tail(log)}")
        time.sleep(0.1)


def _alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie (init may be slow to reap)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def _tail(log: Path, lines: int = 5) -> str:
    try:
        text = log.read_text(errors="replace").strip().splitlines()
    except OSError:
        return "(no log)"
    return " | ".join(text[-lines:]) or "(empty log)"
