"""Who may do what in ZooKeeper: Sluice's ACL, and a server closed to everyone else.

Every node a Sluice client creates carries one ACL entry, ``digest`` for
the identity of ``zookeeper.auth`` with every permission
(:mod:`scheduler.zk.client`); ZooKeeper checks a node's own ACL only, never
its parents', so each node must carry it. A server Sluice owns (the local
stack's, or a deployment's ensemble) is closed further by
:func:`close_server`:

* ``/``, ``/zookeeper`` and ``/zookeeper/quota`` get the same ACL, so a
  client without the password can neither create nodes at the top, list
  them, nor set quotas (``/zookeeper/config``, the ensemble's read-only
  view, stays readable by all, as ZooKeeper makes it);
* when ``/`` or the chroot does not carry Sluice's ACL yet (a tree made by
  an older, unauthenticated run, or changed by someone else), every node
  below ``/`` gets it, children before parents and ``/`` last, so a walk
  cut short is walked again next time. Nodes whose ACL excludes Sluice's
  identity need a superuser (``also_as``) to be changed; without one they
  are reported.

:func:`open_parts` says what a server Sluice does not own lets anyone do.
What stays open on any server: ``exists`` (a node's stat: its size,
version, child count and times) asks for no permission, and the
four-letter words ask for none either.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError, NoNodeError
from kazoo.security import ACL, Permissions, make_digest_acl

from scheduler.errors import SettingsError
from scheduler.zk.client import bare_client
from scheduler.zk.endpoint import DigestIdentity, ZooKeeperEndpoint

SYSTEM = "/zookeeper"
# closed with its children; SYSTEM's other child, ``config``, keeps its world-read ACL
QUOTA = f"{SYSTEM}/quota"
# ACL schemes every client may match: the world, and addresses (a job on the host has one)
_ANYONE = ("world", "ip")


def identity_acl(auth: DigestIdentity) -> list[ACL]:
    """The ACL of every node Sluice owns: its digest identity, every permission."""
    return [make_digest_acl(auth.username, auth.password, all=True)]


def _key(acls: Sequence[ACL]) -> set[tuple[int, str, str]]:
    return {(acl.perms, acl.id.scheme, acl.id.id) for acl in acls}


def open_to_anyone(acls: Sequence[ACL], perms: int) -> bool:
    """True if an entry any client matches (``world``, ``ip``) grants one of ``perms``."""
    return any(acl.id.scheme in _ANYONE and acl.perms & perms for acl in acls)


@dataclass
class Closing:
    """What :func:`close_server` did: nodes whose ACL it set, and those it could not."""

    changed: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)

    @property
    def tree(self) -> list[str]:
        """The changed nodes below ``/`` made by clients (``/`` and ``/zookeeper`` apart)."""
        system = (SYSTEM, f"{SYSTEM}/")
        return [p for p in self.changed if p != "/" and not p.startswith(system)]


def _auth(settings: ZooKeeperEndpoint) -> DigestIdentity:
    if settings.auth is None:
        raise SettingsError("closing ZooKeeper needs zookeeper.auth (Sluice's identity)")
    return settings.auth


class _AclWalker:
    def __init__(self, kazoo: KazooClient, settings: ZooKeeperEndpoint) -> None:
        self.kazoo = kazoo
        self.timeout = settings.call_timeout
        self.acl = identity_acl(_auth(settings))
        self.closing = Closing()

    def call(self, pending: Any) -> Any:
        return pending.get(timeout=self.timeout)

    def acls(self, path: str) -> list[ACL] | None:
        """The ACL of ``path``; None when we may not even read it."""
        try:
            found, _stat = self.call(self.kazoo.get_acls_async(path))
        except NoAuthError:
            return None
        return list(found)

    def ours(self, path: str) -> bool:
        found = self.acls(path)
        return found is not None and _key(found) == _key(self.acl)

    def close(self, path: str) -> None:
        """Give ``path`` Sluice's ACL unless it has it (a vanished node is skipped)."""
        try:
            if self.ours(path):
                return
            self.call(self.kazoo.set_acls_async(path, self.acl))
        except NoNodeError:
            return
        except NoAuthError:
            self.closing.refused.append(path)
            return
        self.closing.changed.append(path)

    def children(self, path: str) -> list[str]:
        try:
            names = self.call(self.kazoo.get_children_async(path))
        except NoNodeError:
            return []
        except NoAuthError:
            self.closing.refused.append(path)
            return []
        base = path.rstrip("/")
        return [f"{base}/{name}" for name in sorted(names)]

    def walk(self, path: str) -> None:
        """Close every node below ``path``, then ``path`` (``/zookeeper`` apart)."""
        for child in self.children(path):
            if child != SYSTEM:
                self.walk(child)
        self.close(path)


def close_server(settings: ZooKeeperEndpoint, also_as: Sequence[DigestIdentity] = ()) -> Closing:
    """Close a server Sluice owns to every client without its password (module docstring).

    ``also_as`` adds identities to act as (the stack's superuser), needed
    only for nodes whose ACL leaves Sluice's identity out.
    """
    root = settings.root if settings.root not in ("", "/") else "/"
    with bare_client(settings, also_as) as kazoo:
        walker = _AclWalker(kazoo, settings)
        walker.call(kazoo.ensure_path_async(root))  # made with Sluice's ACL when missing
        walker.close(SYSTEM)
        walker.walk(QUOTA)
        if not (walker.ours("/") and walker.ours(root)):
            walker.walk("/")
        return walker.closing


def open_parts(settings: ZooKeeperEndpoint) -> list[str]:
    """What a server lets any client do that Sluice relies on no one doing; [] when closed.

    Read with Sluice's identity: a node whose ACL it may not read is closed
    to it, and so to anyone without the right password.
    """
    root = settings.root if settings.root not in ("", "/") else "/"
    found = []
    with bare_client(settings) as kazoo:
        walker = _AclWalker(kazoo, settings)
        top = walker.acls("/")
        if top is not None and open_to_anyone(top, Permissions.CREATE):
            found.append("anyone may create nodes at /")
        if root != "/":
            try:
                chroot = walker.acls(root)
            except NoNodeError:
                chroot = None
            if chroot is not None and open_to_anyone(chroot, Permissions.READ):
                found.append(f"anyone may list and read {root}")
    return found
