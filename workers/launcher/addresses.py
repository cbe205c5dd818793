"""Addresses of local nodes: a /30 per node, leased host-wide.

A local node lives in a network namespace joined to its launcher by a veth
pair on a private /30 taken from ``nodes.local_network`` (the host's end is
the first address, the node the second). Everything a node's network is
named after (the namespace ``sluice-node-<hex>``, the host's veth
``sl<hex>``, where ``<hex>`` is the /30's network address) follows from its
subnet, so a lease on the subnet is a lease on the names too.

Leases are files in :data:`LEASE_DIR` (``/run/sluice/node-leases``, one per
host, whatever the deployment: two launchers on one host, even of two
deployments with overlapping pools, never share a subnet or a name). A lease
is taken under an exclusive ``flock`` of the folder's lock file, which the
kernel drops when its holder dies, and is created with ``O_EXCL``. It
records the node folder it belongs to; a lease whose folder is gone (a
deployment's ``node_dir`` wiped) is stale and is reclaimed, after whatever
is left of its namespace is removed. ``/run`` is a tmpfs, as are network
namespaces: a reboot forgets both together.

A subnet that overlaps an address already on one of the host's interfaces
is skipped, so a pool that clashes with the host's network only shrinks.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from scheduler.errors import SluiceError

LEASE_DIR = Path("/run/sluice/node-leases")
NETNS_DIR = Path("/run/netns")
VETH_NAME = re.compile(r"^sl[0-9a-f]{8}$")
KILL_TIMEOUT = 15.0


class AddressError(SluiceError):
    """No free subnet, or the lease folder cannot be used (not root)."""


@dataclass(frozen=True)
class Lease:
    """One node's /30 and the names that go with it."""

    subnet: ipaddress.IPv4Network
    folder: Path

    @property
    def tag(self) -> str:
        return f"{int(self.subnet.network_address):08x}"

    @property
    def netns(self) -> str:
        return f"sluice-node-{self.tag}"

    @property
    def veth(self) -> str:
        return f"sl{self.tag}"  # 10 characters: interface names stop at 15

    @property
    def host_address(self) -> str:
        return str(self.subnet.network_address + 1)

    @property
    def node_address(self) -> str:
        return str(self.subnet.network_address + 2)

    def to_dict(self) -> dict[str, str]:
        return {"subnet": str(self.subnet), "folder": str(self.folder)}

    @classmethod
    def from_dict(cls, data: dict[str, str]) -> Lease:
        return cls(ipaddress.IPv4Network(data["subnet"]), Path(data["folder"]))


def ip(*args: str, check: bool = True) -> str:
    """Run ``ip ARGS``; its stdout (AddressError with its stderr when it fails and ``check``)."""
    try:
        done = subprocess.run(
            ["ip", *args], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise AddressError(f"ip {' '.join(args)}: {exc}") from exc
    if check and done.returncode != 0:
        raise AddressError(f"ip {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


def _file_name(subnet: ipaddress.IPv4Network) -> str:
    return f"{subnet.network_address}_{subnet.prefixlen}"


class AddressPool:
    """The /30s of ``network``, leased through the files of ``lease_dir``."""

    def __init__(self, network: str, lease_dir: Path = LEASE_DIR) -> None:
        self.network = ipaddress.IPv4Network(network)
        self.lease_dir = lease_dir

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        try:
            self.lease_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd = os.open(self.lease_dir / ".lock", os.O_CREAT | os.O_RDWR, 0o600)
        except OSError as exc:
            raise AddressError(f"node address leases in {self.lease_dir}: {exc.strerror}") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing drops the flock

    def lease(self, folder: Path) -> Lease:
        """A free /30 for the node of ``folder``, recorded until :meth:`release`."""
        with self._locked():
            taken = _addresses_in_use()
            for subnet in self.network.subnets(new_prefix=30):
                if any(address in subnet for address in taken):
                    continue
                lease = Lease(subnet, folder)
                path = self.lease_dir / _file_name(subnet)
                if path.exists() and not self._reclaim(path):
                    continue
                if (NETNS_DIR / lease.netns).exists():
                    continue  # not ours to touch: made by hand, or by a lost lease
                try:
                    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
                except FileExistsError:
                    continue
                with os.fdopen(fd, "w") as out:
                    json.dump(lease.to_dict(), out)
                return lease
        raise AddressError(f"no free /30 left in {self.network} for a local node")

    def _reclaim(self, path: Path) -> bool:
        """Free a stale lease (its node folder is gone); False when it is live."""
        lease = read_lease(path)
        if lease is not None and lease.folder.exists():
            return False
        if lease is not None:
            remove_netns(lease.netns, lease.veth)
        path.unlink(missing_ok=True)
        return True

    def leases(self) -> list[Lease]:
        found = []
        for path in sorted(self.lease_dir.glob("*_*")):
            lease = read_lease(path)
            if lease is not None:
                found.append(lease)
        return found

    def release(self, folder: Path) -> None:
        """Drop every lease held for ``folder``."""
        with self._locked():
            for path in self.lease_dir.glob("*_*"):
                lease = read_lease(path)
                if lease is None or lease.folder == folder:
                    path.unlink(missing_ok=True)


def read_lease(path: Path) -> Lease | None:
    try:
        return Lease.from_dict(json.loads(path.read_text()))
    except (OSError, ValueError, KeyError, TypeError):
        return None  # half written by a dead launcher (the lock was held): free


def _addresses_in_use() -> list[ipaddress.IPv4Address]:
    """IPv4 addresses on this network namespace's interfaces, except our own veths'."""
    found = []
    for line in ip("-o", "-4", "addr", "show").splitlines():
        words = line.split()
        if len(words) < 4 or VETH_NAME.match(words[1].split("@")[0]):
            continue  # a node's veth: its lease says whose it is
        with contextlib.suppress(ValueError):
            found.append(ipaddress.IPv4Interface(words[3]).ip)
    return found


def netns_pids(netns: str) -> list[int]:
    """Processes whose network namespace is ``netns``."""
    out = ip("netns", "pids", netns, check=False)
    return [int(word) for word in out.split() if word.isdigit()]


def remove_netns(netns: str, veth: str) -> None:
    """Kill every process in ``netns``, then delete it and the host's ``veth``."""
    if (NETNS_DIR / netns).exists():
        deadline = time.monotonic() + KILL_TIMEOUT
        while pids := netns_pids(netns):
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            if time.monotonic() > deadline:
                raise AddressError(f"processes {pids} of {netns} outlive SIGKILL")
            time.sleep(0.05)
        ip("netns", "del", netns, check=False)
    if ip("link", "show", veth, check=False):
        ip("link", "del", veth, check=False)
