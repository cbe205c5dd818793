"""Polling a git connection's repositories: ref updates become ``ref-updated`` events.

The connection's projects (every tenant's projects on it) are split into
``poll_partitions`` partitions by a stable hash of the name. A partition is
polled only by the holder of its lock (:mod:`scheduler.zk.members` decides
who tries); one poll lists every project's refs (``git ls-remote``),
compares them with the partition's *offset* (the refs seen last time,
stored in ZooKeeper) and commits the events and the new offset in ONE
transaction fenced by the partition's lock. So a poller killed mid-poll
commits nothing, and its successor starts from the same offset: no ref
update is lost or reported twice.

Events are Zuul's git driver's: ``ref-updated`` with ``oldrev`` all zeros
for a new ref and ``newrev`` all zeros for a deleted one; tags are refs
too (``refs/tags/...``, no branch). A project seen for the first time only
sets its offset (starting a poller must not trigger every branch).
"""

from __future__ import annotations

import logging
import zlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from scheduler.drivers.git.refs import RefError, list_refs
from scheduler.layouts.state import LayoutState
from scheduler.settings.sections import ConnectionSettings
from scheduler.wire.events import TriggerEvent
from scheduler.zk import paths, stored
from scheduler.zk.client import ZooKeeperClient
from scheduler.zk.errors import NoDataError
from scheduler.zk.event_queue import EventQueue
from scheduler.zk.locks import HeldLock

log = logging.getLogger(__name__)

ZERO = "0" * 40
HEADS, TAGS = "refs/heads/", "refs/tags/"
# refs a forge keeps for itself: not branches or tags users push
WATCHED = (HEADS, TAGS)

Refs = Mapping[str, str]
ListRefs = Callable[[ConnectionSettings, str], Refs]


def partition_of(project: str, count: int) -> int:
    """The partition a project belongs to (stable across processes and versions)."""
    return zlib.crc32(project.encode()) % max(1, count)


def projects_of(states: Iterable[LayoutState], connection: str) -> list[str]:
    """Every project of every tenant on ``connection``."""
    found = {p.name for s in states for p in s.tenant.projects if p.connection == connection}
    return sorted(found)


def ref_events(project: str, old: Refs, new: Refs) -> list[TriggerEvent]:
    """The events that turn ``old`` refs into ``new`` ones, in ref order."""
    events = []
    for ref in sorted(set(old) | set(new)):
        if not ref.startswith(WATCHED):
            continue
        before, after = old.get(ref, ZERO), new.get(ref, ZERO)
        if before == after:
            continue
        branch = ref[len(HEADS) :] if ref.startswith(HEADS) else ""
        events.append(
            TriggerEvent(
                type="ref-updated",
                project=project,
                branch=branch,
                ref=ref,
                oldrev=before,
                newrev=after,
                deleted=after == ZERO,
            )
        )
    return events


@dataclass(frozen=True)
class PollResult:
    events: int
    projects: int
    failed: tuple[str, ...] = ()


def poll_partition(  # noqa: PLR0917 (the poll's parts, in order)
    client: ZooKeeperClient,
    held: HeldLock,
    connection: ConnectionSettings,
    partition: int,
    projects: Iterable[str],
    refs_of: ListRefs = list_refs,
) -> PollResult:
    """Poll the partition's projects; commit their events and the new offset together."""
    offset_path = paths.poller_partition_offset(connection.name, partition)
    try:
        found = stored.load(held.context, offset_path)
        seen, version = dict(found.data.get("projects", {})), found.version
    except NoDataError:
        seen, version = {}, -1
    queue = EventQueue(client, paths.connection_event_queue(connection.name))
    queue.ensure()
    txn = held.context.transaction()
    mine = sorted(projects)
    offset: dict[str, dict[str, str]] = {}
    failed = []
    count = 0
    for project in mine:
        try:
            now = {r: s for r, s in refs_of(connection, project).items() if r.startswith(WATCHED)}
        except RefError as exc:
            log.warning("poll %s: %s", connection.name, exc)
            failed.append(project)
            if project in seen:
                offset[project] = dict(seen[project])  # keep: compare again next time
            continue
        if project in seen:
            for event in ref_events(project, seen[project], now):
                queue.put_ops(event.to_dict(), txn)
                count += 1
        offset[project] = now
    if offset != seen or count:
        stored.save(held.context, offset_path, {"projects": offset}, version=version, extra=txn)
    if count:
        log.info("poll %s/%d: %d ref update(s)", connection.name, partition, count)
    return PollResult(count, len(mine), tuple(failed))
