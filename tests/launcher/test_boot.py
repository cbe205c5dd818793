"""Local nodes booted for real (workers/launcher/boot.py): namespaces, bubblewrap, sshd.

Each test boots nodes through :class:`LocalProvider` (no ZooKeeper needed:
``prepare`` and ``cleanup`` work on a node record) from a directory image
whose script wrote ``/etc/image-release``, and logs in over SSH with the
node key. The ``nodes`` fixture shuts down whatever a test booted even
when it fails, and every test checks that cleanup leaves no namespace,
veth, process, lease or folder behind.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import cast

import pytest

from scheduler.settings.nodes import NodeProviderSettings, NodeSettings
from scheduler.stores.node_records import Node
from scheduler.zk.client import ZooKeeperClient
from tests.fixtures.services import missing_service
from tests.fixtures.sshd import ssh_options
from tests.fixtures.waiting import wait_until
from workers.launcher.addresses import NETNS_DIR, AddressPool, ip, netns_pids
from workers.launcher.boot import node_pid, shutdown_node
from workers.launcher.errors import LaunchError
from workers.launcher.providers import LocalProvider

SETTINGS = NodeProviderSettings("sandbox", "local", {"sandbox": 4}, image="base")
REPO = Path(__file__).resolve().parents[2]


@dataclass
class Booter:
    """A local provider on ``tmp_path`` and every node it booted (shut down at the end)."""

    provider: LocalProvider
    image: Path
    key: Path
    booted: list[Node] = field(default_factory=list)
    counter: int = 0

    def node(self, source: Path | None = None) -> Node:
        self.counter += 1
        return Node(
            f"{self.counter:010d}",
            "sandbox",
            "sandbox",
            host=socket.gethostname(),
            connection={"source": str(source or self.image)},
        )

    def boot(self) -> Node:
        draft = self.node()
        self.booted.append(draft)  # even a failed boot is cleaned up after
        ready = self.provider.prepare(draft)
        self.booted[-1] = ready
        return ready

    def ssh(self, node: Node, command: str) -> subprocess.CompletedProcess[str]:
        connection = node.connection
        return subprocess.run(
            ["ssh", *ssh_options(self.key), "-p", str(connection["port"]),
             f"{connection['username']}@{connection['host']}", command],
            check=False, capture_output=True, text=True, timeout=60,
        )  # fmt: skip


def make_image(folder: Path) -> Path:
    """What an image script makes: a tiny root with a release file and a user list."""
    (folder / "etc").mkdir(parents=True)
    (folder / "etc" / "image-release").write_text("sluice test image 7\n")
    (folder / "etc" / "passwd").write_text("root:x:0:0:root:/root:/bin/sh\n")
    (folder / "etc" / "group").write_text("root:x:0:\n")
    (folder / "srv").mkdir()
    (folder / "srv" / "data.txt").write_text("from the image\n")
    return folder


def leftovers(node: Node) -> list[str]:
    """What of ``node`` still exists: namespace, veth, processes, lease, folder."""
    left = []
    netns = str(node.connection.get("netns", ""))
    if netns and (NETNS_DIR / netns).exists():
        left.append(f"netns {netns} ({netns_pids(netns)})")
    veth = "sl" + netns.rsplit("-", 1)[-1] if netns else ""
    if veth and ip("link", "show", veth, check=False):
        left.append(f"veth {veth}")
    root = node.connection.get("root")
    folder = Path(str(root)).parent if root else None
    if folder is not None and folder.exists():
        left.append(f"folder {folder}")
    pool = AddressPool(NodeSettings().local_network)
    left += [f"lease {x.subnet}" for x in pool.leases() if x.folder == folder]
    return left


@pytest.fixture
def nodes(tmp_path: Path) -> Iterator[Booter]:
    if os.geteuid() != 0:
        missing_service("root (network namespaces)")
    for tool in ("bwrap", "ip", "ssh"):
        if shutil.which(tool) is None:
            missing_service(tool)
    key = tmp_path / "ssh" / "nodes_ed25519"
    pool = AddressPool(NodeSettings().local_network)
    provider = LocalProvider(SETTINGS, cast(ZooKeeperClient, None), tmp_path / "nodes", key, pool)
    booter = Booter(provider, make_image(tmp_path / "image"), key)
    try:
        yield booter
    finally:
        for node in booter.booted:
            folder = tmp_path / "nodes" / node.id
            shutdown_node(folder, pool)
            shutil.rmtree(folder, ignore_errors=True)


def test_a_node_shows_its_image_and_runs_python_over_ssh(nodes: Booter) -> None:
    node = nodes.boot()
    connection = node.connection
    assert set(connection) >= {"host", "port", "username", "root", "source", "netns"}
    assert connection["username"] == "root" and connection["port"] == 22
    out = nodes.ssh(node, "cat /etc/image-release /srv/data.txt; hostname; id -u; echo $HOME")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "sluice test image 7",
        "from the image",
        f"node-{node.id}",
        "0",
        "/root",
    ]
    python = nodes.ssh(
        node, "python3 -c 'import json, sys; print(json.dumps(sys.version_info[0]))'"
    )
    assert (python.returncode, python.stdout) == (0, "3\n"), python.stderr
    # the node's root is writable (root's home, /tmp) and is the copy, not the image
    wrote = nodes.ssh(node, "echo job > /root/out && echo t > /tmp/t && cat /root/out")
    assert wrote.stdout == "job\n", wrote.stderr
    assert (Path(connection["root"]) / "root" / "out").read_text() == "job\n"
    assert not (nodes.image / "root").exists()
    # the host's /usr is read-only in the node
    assert nodes.ssh(node, "touch /usr/x").returncode != 0
    nodes.provider.cleanup(node)
    assert leftovers(node) == []


def test_a_node_is_a_copy_removed_on_its_own_host_only(nodes: Booter) -> None:
    (nodes.image / "bin").symlink_to("usr/bin")
    node = nodes.boot()
    root = Path(node.connection["root"])
    assert root == nodes.provider.node_dir / node.id / "root"
    assert (root / "bin").is_symlink(), "the image's own /bin is kept"
    assert nodes.ssh(node, "echo changed > /etc/image-release").returncode == 0
    assert (nodes.image / "etc" / "image-release").read_text() == "sluice test image 7\n"
    elsewhere = replace(node, host="another-host")
    assert nodes.provider.cleanup(elsewhere) is False and root.exists()
    assert nodes.ssh(node, "true").returncode == 0, "still running"
    assert nodes.provider.cleanup(node) is True
    assert leftovers(node) == []
    assert (nodes.image / "etc" / "image-release").exists()


def test_two_nodes_get_their_own_addresses_and_both_log_in(nodes: Booter) -> None:
    first, second = nodes.boot(), nodes.boot()
    assert first.connection["host"] != second.connection["host"]
    assert first.connection["netns"] != second.connection["netns"]
    for node in (first, second):
        out = nodes.ssh(node, "hostname")
        assert out.stdout.strip() == f"node-{node.id}", out.stderr
    # each node sees only its own network: the other's address is not on its link
    seen = nodes.ssh(first, "cat /proc/net/fib_trie")
    assert str(second.connection["host"]) not in seen.stdout
    for node in (first, second):
        nodes.provider.cleanup(node)
        assert leftovers(node) == []


def test_a_failed_boot_leaves_nothing(nodes: Booter, tmp_path: Path) -> None:
    missing = nodes.node(tmp_path / "no-such-image")
    with pytest.raises(LaunchError, match="is missing"):
        nodes.provider.prepare(missing)
    assert not (tmp_path / "nodes" / missing.id).exists()
    # the node key cannot be made: nothing is copied or booted
    pool = nodes.provider.pool
    leases_before = pool.leases()
    nodes.provider.node_key = tmp_path / "unwritable" / "key"
    (tmp_path / "unwritable").write_text("a file, not a folder")
    with pytest.raises(LaunchError, match="node key"):
        nodes.boot()
    assert pool.leases() == leases_before
    assert not any((tmp_path / "nodes").glob("*")), "no folder left"


def test_an_sshd_that_exits_fails_the_boot_and_leaves_nothing(nodes: Booter) -> None:
    # an /etc/passwd that is a dangling link is left alone: sshd finds no sshd user
    passwd = nodes.image / "etc" / "passwd"
    passwd.unlink()
    passwd.symlink_to("passwd.elsewhere")
    pool = nodes.provider.pool
    leases_before = pool.leases()
    namespaces_before = sorted(NETNS_DIR.glob("sluice-node-*"))
    with pytest.raises(LaunchError, match="sshd exited") as failed:
        nodes.boot()
    assert "sshd" in str(failed.value)
    assert pool.leases() == leases_before
    assert sorted(NETNS_DIR.glob("sluice-node-*")) == namespaces_before
    assert not any(nodes.provider.node_dir.glob("*")), "no folder left"


NOT_ROOT = """
import sys
from pathlib import Path
from scheduler.settings.nodes import NodeSettings
from workers.launcher.addresses import AddressPool
from workers.launcher.boot import boot_node
from workers.launcher.errors import LaunchError
import os
# Drop to nobody only now: the checkout need not be readable by nobody (a
# CI clone in a 0700 folder from mktemp -d).
os.setgroups([])
os.setresgid(65534, 65534, 65534)
os.setresuid(65534, 65534, 65534)
folder = Path(sys.argv[1])
try:
    boot_node(folder, folder / "root", [], AddressPool(NodeSettings().local_network),
              hostname="node-x")
except LaunchError as exc:
    print(exc)
"""


def test_a_boot_without_root_says_so(nodes: Booter, tmp_path: Path) -> None:
    folder = tmp_path / "unprivileged"
    (folder / "root").mkdir(parents=True)
    folder.chmod(0o777)
    done = subprocess.run(
        [sys.executable, "-c", NOT_ROOT, str(folder)],
        cwd=REPO, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.stdout.strip() == (
        "booting a local node needs root (network namespaces, bubblewrap)"
    ), done.stderr
    assert sorted(p.name for p in folder.iterdir()) == ["root"], "nothing made"


BOOT_AND_WAIT = """
import socket, sys, time
from pathlib import Path
from typing import cast
from scheduler.settings.nodes import NodeProviderSettings, NodeSettings
from scheduler.stores.node_records import Node
from workers.launcher.addresses import AddressPool
from workers.launcher.providers import LocalProvider
tmp, image = Path(sys.argv[1]), sys.argv[2]
settings = NodeProviderSettings("sandbox", "local", {"sandbox": 1}, image="base")
pool = AddressPool(NodeSettings().local_network)
key = tmp / "ssh" / "nodes_ed25519"
provider = LocalProvider(settings, cast(object, None), tmp / "nodes", key, pool)
node = provider.prepare(Node("0000000099", "sandbox", "sandbox", host=socket.gethostname(),
                             connection={"source": image}))
import json
print(json.dumps(dict(node.connection)), flush=True)
time.sleep(3600)
"""


def test_the_node_outlives_the_process_that_booted_it(nodes: Booter, tmp_path: Path) -> None:
    draft = Node("0000000099", "sandbox", "sandbox", host=socket.gethostname())
    nodes.booted.append(draft)
    booter = subprocess.Popen(
        [sys.executable, "-c", BOOT_AND_WAIT, str(tmp_path), str(nodes.image)],
        cwd=REPO, stdout=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        assert booter.stdout is not None
        line = booter.stdout.readline()
        assert line, "the booting process printed its node"
        node = Node(
            draft.id, draft.provider, draft.label, host=draft.host, connection=json.loads(line)
        )
        nodes.booted[-1] = node
        os.killpg(booter.pid, signal.SIGKILL)
        booter.wait(timeout=30)
    finally:
        if booter.poll() is None:
            os.killpg(booter.pid, signal.SIGKILL)
            booter.wait()
    time.sleep(0.5)
    folder = tmp_path / "nodes" / node.id
    assert node_pid(folder) is not None, "the node's daemon runs on"
    out = nodes.ssh(node, "cat /etc/image-release")
    assert out.stdout == "sluice test image 7\n", out.stderr
    # what a launcher's check does with the used node: another process cleans up
    assert nodes.provider.cleanup(node) is True
    wait_until(lambda: not leftovers(node), 15, "the node gone")
    assert node_pid(folder) is None
