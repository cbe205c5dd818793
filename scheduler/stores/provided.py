"""What a change's providing jobs left in a pipeline, after its item left (Zuul's database lookup).

A job that ``requires`` a name waits for the providing jobs of the live items
of the changes it depends on (:mod:`scheduler.manager.requirements`). A
change it depends on that is no longer in the pipeline (tested and reported
earlier, not merged) is looked up here instead, as Zuul looks up the change's
most recent buildset in its database.

``/provided/<tenant>/<pipeline>/<change key>`` holds a
:class:`ProvidedRecord`: the change (its commit: the patchset) and, for each
job of its last reported buildset that provides something, the build's
uuid, result, what it provides and the artifacts it returned. The pass that
removes a reported item writes it (:func:`set_ops`) in the same fenced
transaction (only the pipeline's lock holder writes under its pipeline); a
later buildset of the change replaces it; one larger than
:data:`MAX_RECORD_BYTES` is kept without its artifacts. The sweep forgets
records older than :data:`RETENTION` (:func:`prune`).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from kazoo.exceptions import NoNodeError

from scheduler.model import artifacts
from scheduler.model.change import Change
from scheduler.model.item import QueueItem
from scheduler.zk import paths, stored
from scheduler.zk.client import ZooKeeperClient
from scheduler.zk.context import Transaction
from scheduler.zk.errors import DecodeError

RETENTION = 14 * 86400.0
# a record's largest size (as stored); a larger one is kept without its artifacts
MAX_RECORD_BYTES = 256 * 1024

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ProvidedBuild:
    """One providing job's last build of a reported buildset."""

    job: str
    uuid: str
    result: str
    provides: tuple[str, ...]
    artifacts: tuple[Mapping[str, Any], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "job": self.job,
            "uuid": self.uuid,
            "result": self.result,
            "provides": list(self.provides),
            "artifacts": [dict(a) for a in self.artifacts],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ProvidedBuild:
        return cls(
            job=str(data["job"]),
            uuid=str(data.get("uuid", "")),
            result=str(data.get("result", "")),
            provides=tuple(str(p) for p in data.get("provides", ())),
            artifacts=tuple(dict(a) for a in data.get("artifacts", ())),
        )


@dataclass(frozen=True)
class ProvidedRecord:
    """The providing jobs of a change's last reported buildset in one pipeline."""

    change: Change
    buildset: str
    time: float
    builds: tuple[ProvidedBuild, ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        return {
            "change": self.change.to_dict(),
            "buildset": self.buildset,
            "time": self.time,
            "builds": [b.to_dict() for b in self.builds],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ProvidedRecord:
        return cls(
            change=Change.from_dict(dict(data["change"])),
            buildset=str(data.get("buildset", "")),
            time=float(data.get("time", 0.0)),
            builds=tuple(ProvidedBuild.from_dict(b) for b in data.get("builds", ())),
        )


def record_of(item: QueueItem, now: float) -> ProvidedRecord | None:
    """What ``item``'s providing jobs left; None if none of its jobs provides anything."""
    found = []
    for job in (item.buildset.jobs or {}).values():
        if not job.info.provides:
            continue
        build = job.current
        result = job.result.value if job.result is not None else "ABORTED"
        data = build.result_data if build is not None else {}
        found.append(
            ProvidedBuild(
                job.name,
                build.uuid if build is not None else "",
                result,
                job.info.provides,
                tuple(artifacts.received(data, item.change, job.name)),
            )
        )
    if not found:
        return None
    change = Change.from_dict({**item.change.to_dict(), "needs": []})
    return ProvidedRecord(change, item.buildset.uuid, now, tuple(found))


def set_ops(
    client: ZooKeeperClient, tenant: str, pipeline: str, record: ProvidedRecord, txn: Transaction
) -> None:
    """Write ``record`` (replacing the change's last one) in ``txn``."""
    path = paths.provided(tenant, pipeline, record.change.key)
    data = stored.encode(record.to_dict())
    if len(data) > MAX_RECORD_BYTES:
        # results matter more than artifacts: keep them, never fail the commit
        log.warning("%s: artifacts of %s too large to record", path, record.buildset)
        bare = tuple(replace(b, artifacts=()) for b in record.builds)
        data = stored.encode(replace(record, builds=bare).to_dict())
    if client.exists(path) is None:
        client.ensure_path(paths.parent(path))
        txn.create(path, data)
    else:
        txn.set(path, data)


class ProvidedRecords:
    """The records of one pipeline, each read at most once (one pass's lookups)."""

    def __init__(self, client: ZooKeeperClient, tenant: str, pipeline: str) -> None:
        self.client = client
        self.tenant = tenant
        self.pipeline = pipeline
        self._read: dict[str, ProvidedRecord | None] = {}

    def get(self, change: Change) -> ProvidedRecord | None:
        """The record of ``change`` if it is of the same patchset (commit)."""
        if change.key not in self._read:
            self._read[change.key] = self._load(change.key)
        record = self._read[change.key]
        if record is None or (change.commit and record.change.commit != change.commit):
            return None
        return record

    def _load(self, key: str) -> ProvidedRecord | None:
        path = paths.provided(self.tenant, self.pipeline, key)
        try:
            raw, _ = self.client.get(path)
        except NoNodeError:
            return None
        try:
            return ProvidedRecord.from_dict(stored.decode(raw, path))
        except (DecodeError, KeyError, TypeError, ValueError):
            return None  # unreadable: as if there were none


def prune(client: ZooKeeperClient, now: float | None = None) -> list[str]:
    """Forget records older than :data:`RETENTION`; the ones removed (``tenant/pipeline/key``)."""
    now = time.time() if now is None else now
    removed: list[str] = []
    root = paths.provided_root()
    for tenant in _children(client, root):
        for pipeline in _children(client, paths.join(root, tenant)):
            folder = paths.join(root, tenant, pipeline)
            for child in _children(client, folder):
                path = paths.join(folder, child)
                try:
                    raw, _ = client.get(path)
                    when = float(stored.decode(raw, path).get("time", 0.0))
                except NoNodeError:
                    continue
                except (DecodeError, TypeError, ValueError):
                    when = 0.0  # unreadable: forgotten
                if now - when > RETENTION:
                    with contextlib.suppress(NoNodeError):
                        client.delete(path)
                    removed.append("/".join(paths.unsegment(s) for s in (tenant, pipeline, child)))
    return removed


def _children(client: ZooKeeperClient, path: str) -> list[str]:
    try:
        return sorted(client.get_children(path))
    except NoNodeError:
        return []
