"""Autohold requests: keep the workspace of the next failing builds of a job.

Zuul's autohold, stored in ZooKeeper: ``/hold-requests/<id>`` holds one
request (tenant, project, job, an optional ref regex, a reason, how many
builds to hold) and the builds held for it so far. The scheduler asks
:meth:`AutoholdStore.matching` when it requests a build (the build spec
then says ``hold``), and the executor keeps the workspace of a held build
that did not succeed. When such a build's result comes back, the pipeline
records it with :meth:`AutoholdStore.record` (a compare-and-set, so two
passes never count one build twice, nor hold more builds than asked).
A request whose count is used up matches nothing more; an operator lists
and deletes requests with ``sluice autohold``.
"""

from __future__ import annotations

import re
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from scheduler.zk import paths, stored
from scheduler.zk.client import ZooKeeperClient
from scheduler.zk.errors import ConflictError
from scheduler.zk.retry import CONFLICT


@dataclass(frozen=True)
class HeldBuild:
    build: str
    workspace: str
    held_at: float

    def to_dict(self) -> dict[str, Any]:
        return {"build": self.build, "workspace": self.workspace, "held_at": self.held_at}


@dataclass(frozen=True)
class AutoholdRequest:
    id: str
    tenant: str
    project: str
    job: str
    ref: str = ""  # a regex the ref must match (search); "" for any
    reason: str = ""
    count: int = 1
    created: float = 0.0
    held: tuple[HeldBuild, ...] = ()
    version: int = field(default=-1, compare=False)

    @property
    def remaining(self) -> int:
        return max(0, self.count - len(self.held))

    def matches(self, tenant: str, project: str, job: str, ref: str) -> bool:
        if (self.tenant, self.project, self.job) != (tenant, project, job) or not self.remaining:
            return False
        return not self.ref or re.search(self.ref, ref) is not None

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "tenant": self.tenant,
            "project": self.project,
            "job": self.job,
            "ref": self.ref,
            "reason": self.reason,
            "count": self.count,
            "created": self.created,
            "held": [h.to_dict() for h in self.held],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], version: int = -1) -> AutoholdRequest:
        return cls(
            id=str(data["id"]),
            tenant=str(data["tenant"]),
            project=str(data["project"]),
            job=str(data["job"]),
            ref=str(data.get("ref", "")),
            reason=str(data.get("reason", "")),
            count=int(data.get("count", 1)),
            created=float(data.get("created", 0.0)),
            held=tuple(
                HeldBuild(str(h["build"]), str(h["workspace"]), float(h["held_at"]))
                for h in data.get("held", ())
            ),
            version=version,
        )


class AutoholdError(ValueError):
    """An autohold request that cannot be made as asked."""


class AutoholdStore:
    def __init__(self, client: ZooKeeperClient) -> None:
        self.client = client

    def add(
        self,
        tenant: str,
        project: str,
        job: str,
        *,
        ref: str = "",
        reason: str = "",
        count: int = 1,
    ) -> AutoholdRequest:
        if count < 1:
            raise AutoholdError(f"count must be at least 1, got {count}")
        try:
            re.compile(ref)
        except re.error as exc:
            raise AutoholdError(f"ref {ref!r} is not a valid regex: {exc}") from None
        request = AutoholdRequest(
            id=uuid.uuid4().hex[:12],
            tenant=tenant,
            project=project,
            job=job,
            ref=ref,
            reason=reason,
            count=count,
            created=time.time(),
        )
        try:
            self.client.create(
                paths.hold_request(request.id), stored.encode(request.to_dict()), makepath=True
            )
        except NodeExistsError:  # a 48-bit id met another: make a new one
            return self.add(tenant, project, job, ref=ref, reason=reason, count=count)
        return replace(request, version=0)

    def get(self, request_id: str) -> AutoholdRequest | None:
        path = paths.hold_request(request_id)
        try:
            raw, stat = self.client.get(path)
        except NoNodeError:
            return None
        return AutoholdRequest.from_dict(stored.decode(raw, path), int(stat.version))

    def list(self) -> list[AutoholdRequest]:
        try:
            ids = self.client.get_children(paths.hold_requests())
        except NoNodeError:
            return []
        found = [r for r in (self.get(i) for i in sorted(ids)) if r is not None]
        return sorted(found, key=lambda r: r.created)

    def delete(self, request_id: str) -> bool:
        try:
            self.client.delete(paths.hold_request(request_id))
        except NoNodeError:
            return False
        return True

    def matching(self, tenant: str, project: str, job: str, ref: str) -> AutoholdRequest | None:
        """The oldest request that still wants a build of this job held."""
        for request in self.list():
            if request.matches(tenant, project, job, ref):
                return request
        return None

    def record(
        self, tenant: str, project: str, job: str, ref: str, *, build: str, workspace: str
    ) -> AutoholdRequest | None:
        """Count the held ``build`` against the request it matches; None if none wants it.

        Idempotent: a build already recorded is not counted again.
        """
        for _ in CONFLICT.tries():
            for known in self.list():
                if any(h.build == build for h in known.held):
                    return known
            request = self.matching(tenant, project, job, ref)
            if request is None:
                return None
            held = (*request.held, HeldBuild(build, workspace, time.time()))
            updated = replace(request, held=held)
            try:
                stat = self.client.set(
                    paths.hold_request(request.id),
                    stored.encode(updated.to_dict()),
                    version=request.version,
                )
            except (BadVersionError, NoNodeError):
                continue  # changed or deleted meanwhile: look again
            return replace(updated, version=int(stat.version))
        raise ConflictError(f"autohold for {job}: too much contention recording {build}")


class AutoholdIndex:
    """Which builds an autohold wants, as one process asks it for every build request.

    The listing of ``/hold-requests`` is kept for ``ttl`` seconds, so a busy
    scheduler pays one listing every few seconds, not one per build (issue
    17). An autohold added or used up meanwhile is seen at most ``ttl``
    seconds late; the executor's :meth:`AutoholdStore.record` is exact.
    """

    def __init__(self, client: ZooKeeperClient, ttl: float = 2.0) -> None:
        self.store = AutoholdStore(client)
        self.ttl = ttl
        self._lock = threading.Lock()
        self._requests: list[AutoholdRequest] = []
        self._read_at = float("-inf")

    def wants(self, tenant: str, project: str, job: str, ref: str) -> bool:
        with self._lock:
            if time.monotonic() - self._read_at > self.ttl:
                self._requests = self.store.list()
                self._read_at = time.monotonic()
            requests = self._requests
        return any(r.matches(tenant, project, job, ref) for r in requests)
