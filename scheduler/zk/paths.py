"""Every ZooKeeper path Sluice uses, built in this one module.

The tree follows the ZooKeeper map of Zuul (seed 000) with the root renamed:
the client's chroot is the configured root (default ``/sluice``), so the
paths here are absolute within it. Names from outside (tenants, projects,
branches, jobs) are encoded with :func:`segment` before they become path
segments. docs/zookeeper.md lists the tree as built.
"""

from __future__ import annotations

from urllib.parse import quote

SYSTEM_ROOT = "/system"


def segment(name: str) -> str:
    """Encode an outside name as one safe path segment (``feature/x`` -> ``feature%2Fx``)."""
    encoded = quote(name, safe="", errors="backslashreplace")
    if encoded in ("", ".", ".."):
        return {"": "%00empty", ".": "%2E", "..": "%2E%2E"}[encoded]
    return encoded


def roundtrip(token: str) -> str:
    """The node the foundation round-trip task writes (``sluice demo``)."""
    return f"{SYSTEM_ROOT}/roundtrip/{segment(token)}"
