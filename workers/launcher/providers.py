"""Node providers: what a node is made of, per driver.

A provider plans nodes for a request's labels from the nodes that exist
(quotas per label, capacity per static host), fills in how to reach a
node once it is allocated (``prepare``) and removes what a used node was
(``cleanup``). Planning happens under the provider's allocation lock, so
the counts it reads are not changed by another launcher meanwhile.

* **static**: existing hosts reached over SSH. A node is a slot on a host
  that serves its label; a host has at most ``max_parallel_jobs`` nodes.
  Nothing is made or removed on the host.
* **local**: a fresh root on the launcher's host, a copy of the newest
  ready upload of the provider's image (a directory, or a ``.tar.gz``
  unpacked), under ``<node_dir>/<node id>/root``, booted
  (:mod:`workers.launcher.boot`): a network namespace of its own with an
  sshd in a bubblewrap whose ``/`` is that root.

Every node's ``connection`` has ``host``, ``port`` and ``username``: what
SSH (and Ansible) use. A local node's adds ``root``, ``source`` and
``netns``; its :attr:`Node.host` is the launcher's host (the only one that
may remove it), its ``connection["host"]`` the node's own address.
"""

from __future__ import annotations

import shutil
import socket
import tarfile
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from scheduler.settings.nodes import NodeProviderSettings, NodeSettings
from scheduler.stores.images import ImageStore
from scheduler.stores.node_records import Node
from scheduler.zk.client import ZooKeeperClient
from workers.launcher.addresses import AddressPool
from workers.launcher.boot import boot_node, shutdown_node
from workers.launcher.errors import LaunchError
from workers.nodekey import NodeKeyError, ensure_node_key, public_key


class NodeProvider:
    """What every driver shares: labels and their quotas."""

    def __init__(self, settings: NodeProviderSettings) -> None:
        self.settings = settings

    @property
    def name(self) -> str:
        return self.settings.name

    def serves(self, label: str) -> bool:
        return label in self.settings.labels

    def plan(self, labels: Sequence[str], nodes: Sequence[Node]) -> list[Node] | str:
        """Drafts of one node per label, or why this provider cannot serve them now."""
        mine = [n for n in nodes if n.provider == self.name]
        counts = Counter(n.label for n in mine)
        for label, wanted in Counter(labels).items():
            quota = self.settings.labels[label]
            if counts[label] + wanted > quota:
                return f"provider {self.name}: quota of {label} reached ({quota} nodes)"
        return self.place(labels, mine)

    def place(self, labels: Sequence[str], mine: Sequence[Node]) -> list[Node] | str:
        raise NotImplementedError

    def prepare(self, node: Node) -> Node:
        """The allocated node with what it takes to reach it."""
        return node

    def cleanup(self, node: Node) -> bool:
        """Remove what a used node was; False when this launcher cannot (not its host)."""
        return True


class StaticProvider(NodeProvider):
    """Slots on existing hosts."""

    def place(self, labels: Sequence[str], mine: Sequence[Node]) -> list[Node] | str:
        used = Counter(n.host for n in mine)
        drafts = []
        for label in labels:
            free = [
                h
                for h in self.settings.hosts
                if label in h.labels and used[h.name] < h.max_parallel_jobs
            ]
            if not free:
                return f"provider {self.name}: every host of {label} runs its most jobs"
            host = min(free, key=lambda h: used[h.name])
            used[host.name] += 1
            connection = {"host": host.name, "port": host.port, "username": host.username}
            drafts.append(Node("", self.name, label, host=host.name, connection=connection))
        return drafts


class LocalProvider(NodeProvider):
    """Nodes booted on this host from copies of the image's newest ready upload."""

    def __init__(
        self,
        settings: NodeProviderSettings,
        client: ZooKeeperClient,
        node_dir: Path,
        node_key: Path,
        pool: AddressPool,
    ) -> None:
        super().__init__(settings)
        self.images = ImageStore(client)
        self.node_dir = node_dir
        self.node_key = node_key
        self.pool = pool
        self.host = socket.gethostname()

    def place(self, labels: Sequence[str], mine: Sequence[Node]) -> list[Node] | str:
        image, where = self.settings.image, self.settings.image_provider
        upload = self.images.latest_upload(image, where)
        if upload is None:
            return f"provider {self.name}: image {image} has no ready upload to {where} yet"
        used = f"{image}/{upload.build_id}/{upload.id}"
        source = {"source": upload.external_id}
        return [
            Node("", self.name, label, host=self.host, connection=source, image_upload=used)
            for label in labels
        ]

    def prepare(self, node: Node) -> Node:
        source = Path(str(node.connection.get("source", "")))
        folder = self.node_dir / node.id
        root = folder / "root"
        try:
            keys = [public_key(ensure_node_key(self.node_key))]
        except NodeKeyError as exc:
            raise LaunchError(str(exc)) from exc
        self._copy(node, source, root)
        try:
            booted = boot_node(folder, root, keys, self.pool, hostname=f"node-{node.id}")
        except LaunchError:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        connection = {**booted.connection(), "root": str(root), "source": str(source)}
        return replace(node, connection=connection)

    def _copy(self, node: Node, source: Path, root: Path) -> None:
        if not source.is_dir() and not source.name.endswith((".tar.gz", ".tgz")):
            raise LaunchError(f"image upload {node.image_upload}: {source} is missing")
        try:
            if root.parent.exists():  # a leftover of this id: whatever ran there goes first
                shutdown_node(root.parent, self.pool)
                shutil.rmtree(root.parent)
            root.parent.mkdir(parents=True)
            if source.is_dir():
                shutil.copytree(source, root, symlinks=True)
            else:
                root.mkdir()
                with tarfile.open(source) as archive:
                    archive.extractall(root, filter="tar")
        except OSError as exc:
            shutil.rmtree(root.parent, ignore_errors=True)
            raise LaunchError(f"copying {source} for node {node.id}: {exc}") from exc

    def cleanup(self, node: Node) -> bool:
        """Shut the node down (its processes, namespace, lease) and remove its folder."""
        if node.host != self.host:
            return False
        root = node.connection.get("root")
        folder = Path(str(root)).parent if root else self.node_dir / node.id
        if folder.parent == self.node_dir:
            shutdown_node(folder, self.pool)
            shutil.rmtree(folder, ignore_errors=True)
        return True


def make_providers(
    settings: NodeSettings, client: ZooKeeperClient, node_dir: Path, node_key: Path
) -> list[NodeProvider]:
    """One provider object per configured provider, in the configured order."""
    made: list[NodeProvider] = []
    pool = AddressPool(settings.local_network)
    for provider in settings.providers:
        if provider.driver == "static":
            made.append(StaticProvider(provider))
        else:
            made.append(LocalProvider(provider, client, node_dir, node_key, pool))
    return made
