"""The ZooKeeper paths of Nodepool's subtree: nodes, node requests, images, launchers.

The rest of the tree is built in :mod:`scheduler.zk.paths`, whose
:func:`~scheduler.zk.paths.segment` encodes every outside name here too.
These are the paths of ``scheduler/stores/nodes.py`` (node requests and nodes,
seed 000's ``nodepool/requests`` model), ``scheduler/stores/images.py`` (image
builds and uploads, seed 004), the launchers' locks and elections, and the
seed's new-style ``nodeset``/``nodes``/``images`` paths that stay unused
(docs/zookeeper.md, departure 29).
"""

from __future__ import annotations

from scheduler.zk.paths import join, parent, segment

# ---------------------------------------------------------------- elections
# ``/nodepool`` is seed 000's election node, unused: the parent of the
# images and node requests below.


def launcher_stats_election() -> str:
    return join("launcher", "stats-election")


def nodepool_election() -> str:
    return join("nodepool")


# ---------------------------------------------------------------- nodes and images (new style)
# Seed 000's ``nodeset``/``nodes``/``images`` paths, built but unused
# (departure 29: node requests use the ``nodepool/requests`` model below).


def nodeset_request(request_uuid: str) -> str:
    return join("nodeset", "requests", segment(request_uuid))


def nodeset_lock(request_uuid: str) -> str:
    return join("nodeset", "locks", segment(request_uuid))


def node(node_uuid: str) -> str:
    return join("nodes", "nodes", segment(node_uuid))


def node_lock(node_uuid: str) -> str:
    return join("nodes", "locks", segment(node_uuid))


def image_artifact(artifact_uuid: str) -> str:
    return join("images", "artifacts", segment(artifact_uuid))


def image_upload(image: str, build_uuid: str, endpoint: str) -> str:
    return join("image-uploads", segment(image), segment(build_uuid), "endpoint", segment(endpoint))


# ---------------------------------------------------------------- images (seed 004)
# Nodepool's image builds as the seed describes them: builds are sequence
# nodes under ``builds/`` beside the build lock, uploads are sequence nodes
# per provider under their build (``scheduler/stores/images.py``, docs/nodes.md).


def images_root() -> str:
    """Parent of every image (its children name images)."""
    return join("nodepool", "image")


def image_root(image: str) -> str:
    return join(images_root(), segment(image))


def image_request_build(image: str) -> str:
    """Flag: build ``image`` now, off its schedule (``sluice image build``)."""
    return join(image_root(image), "request-build")


def image_builds(image: str) -> str:
    return join(image_root(image), "builds")


def image_build_lock(image: str) -> str:
    """Held by the one builder building ``image`` (a child of ``builds/``, as in the seed)."""
    return join(image_builds(image), "lock")


def image_build(image: str, build_id: str) -> str:
    return join(image_builds(image), segment(build_id))


def image_build_providers(image: str, build_id: str) -> str:
    return join(image_build(image, build_id), "provider")


def provider_uploads(image: str, build_id: str, provider: str) -> str:
    """The uploads of one build to one provider: ``.../provider/<p>/images``."""
    return join(image_build_providers(image, build_id), segment(provider), "images")


def provider_upload_lock(image: str, build_id: str, provider: str) -> str:
    """Held by the builder uploading the build to the provider."""
    return join(provider_uploads(image, build_id, provider), "lock")


def provider_upload(image: str, build_id: str, provider: str, upload_id: str) -> str:
    return join(provider_uploads(image, build_id, provider), segment(upload_id))


# ---------------------------------------------------------------- node requests and nodes
# Nodepool's node requests and nodes as seed 000 maps ``nodepool/requests``
# (``scheduler/stores/nodes.py``, docs/nodes.md): requests are sequence nodes
# named ``<priority>-<seq>``, locked through a side channel so a requestor
# may delete a request whatever its lock; a node's lock is its own child.


def node_requests_root() -> str:
    """Parent of every node request (children ``<priority>-<seq>``, sorted by both)."""
    return join("nodepool", "requests")


def node_request_prefix(priority: int) -> str:
    """What a sequential create appends the sequence number to (``.../100-``)."""
    return join(node_requests_root(), f"{priority:03d}-")


def node_request(request_id: str) -> str:
    return join(node_requests_root(), segment(request_id))


def is_node_request(path: str) -> bool:
    """Whether ``path`` is a node request (a failed create: another took its id)."""
    return parent(path) == node_requests_root()


def node_request_locks_root() -> str:
    return join("nodepool", "requests-lock")


def node_request_lock(request_id: str) -> str:
    """Held by the launcher working on the request (kazoo lock contenders)."""
    return join(node_request_locks_root(), segment(request_id))


def nodepool_nodes_root() -> str:
    """Parent of every node (children are ten-digit ids)."""
    return join("nodepool", "nodes")


def nodepool_node(node_id: str) -> str:
    return join(nodepool_nodes_root(), segment(node_id))


def nodepool_node_lock(node_id: str) -> str:
    """Held by whoever uses the node (the executor running a build on it)."""
    return join(nodepool_node(node_id), "lock")


def launcher_provider_lock(provider: str) -> str:
    """Held by a launcher while it counts a provider's nodes and allocates new ones."""
    return join("nodepool", "launchers", "provider", segment(provider), "lock")
