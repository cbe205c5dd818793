"""The ending side of a job request queue: removal, counts and the sweeps' reads.

:class:`RequestSweeps` is a base of :class:`~scheduler.stores.job_requests.JobRequestQueue`;
it holds what the maintenance sweep, the metrics, ``sluice wait --idle`` and
the submitters' clean-up call, apart from the submit/claim/complete path.

**In flight.** Every COMPLETED request has its ``results/<uuid>`` marker,
created in the completing transaction and deleted with the request in one
transaction (:meth:`RequestSweeps.remove`). So the requests in flight are
the requests minus the markers: :meth:`RequestSweeps.active_count` counts
them by two stats, :meth:`RequestSweeps._in_flight` names them by two
listings. Completed requests stay a day (for their submitters), or,
where the caller says which are still needed (the sweep: those whose
completion events are still queued, and the merges an item still names
for replays), only until nothing needs them;
the sweeps and metrics never read them, so their cost follows the work in
flight, not the history.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable

from kazoo.exceptions import NoNodeError

from scheduler.stores.request_records import JobRequest, RequestState
from scheduler.zk import paths, stored
from scheduler.zk.client import ZooKeeperClient
from scheduler.zk.context import OpFailedError, Transaction

# Requests removed together in one transaction (:meth:`RequestSweeps.remove_many`):
# four deletes each, a few kB of paths.
REMOVE_BATCH = 50
# (client, queue root) -> completion time of each completed request seen: a
# marker is written once, so each is statted once by a cleaning process.
_completed_at: dict[tuple[int, str], dict[str, float]] = {}


class RequestSweeps:
    """Removal, counts and sweeps of the queue at ``root``."""

    client: ZooKeeperClient
    root: str

    def _path(self, child: str, uuid: str) -> str:
        return paths.request_child(self.root, child, uuid)

    def remove(self, uuid: str) -> None:
        """Delete everything of one request (the submitter is done with it).

        The request and its result marker go in one transaction, so the
        queue never holds a marker without its request (:meth:`active_count`
        counts their difference); the rest follows.
        """
        for _ in range(3):
            if self._remove_request_and_marker(uuid):
                break
        for child in ("requests", "params", "result-data", "results", "waiters"):
            with contextlib.suppress(NoNodeError):
                self.client.delete_tree(self._path(child, uuid))

    def _remove_request_and_marker(self, uuid: str) -> bool:
        request = self._path("requests", uuid)
        try:
            flags = self.client.get_children(request)
        except NoNodeError:
            return True  # gone already (the marker, if any, is deleted after)
        txn = Transaction(self.client)
        for flag in flags:  # cancel, resume
            txn.delete(paths.join(request, flag))
        txn.delete(request)
        if self.client.exists(self._path("results", uuid)) is not None:
            txn.delete(self._path("results", uuid))
        try:
            txn.commit()
        except OpFailedError:
            return False  # a flag or the marker came or went meanwhile: look again
        return True

    def active_count(self) -> int:
        """How many requests are not COMPLETED, in three stats (``sluice wait --idle``).

        Every COMPLETED request has its ``results/<uuid>`` marker (created in
        the completing transaction, deleted with the request), so the count
        is requests minus markers. The markers' child version is read before
        and after the requests' count: equal, no request completed or went
        away in between and the difference is exact; else it is read again.
        """
        requests = paths.request_child(self.root, "requests")
        results = paths.request_child(self.root, "results")
        for _ in range(5):
            before = self.client.exists(results)
            counted = self.client.exists(requests)
            after = self.client.exists(results)
            if counted is None:
                return 0
            markers = 0 if after is None else int(after.numChildren)
            if (before is None) == (after is None) and (
                before is None or before.cversion == after.cversion
            ):
                return max(0, int(counted.numChildren) - markers)
        return len(self.active())  # completions all along: count them one by one

    # ------------------------------------------------------------ sweeps

    def _names(self, child: str) -> set[str]:
        try:
            return set(self.client.get_children(paths.request_child(self.root, child)))
        except NoNodeError:
            return set()

    def _read(self, names: Iterable[str]) -> list[JobRequest]:
        wanted = {n: self._path("requests", n) for n in names}
        return [
            JobRequest.from_dict(data, version)
            for _name, data, version in stored.decode_each(self.client, wanted)
        ]

    def listed(self) -> set[str]:
        """The uuid of every request in the queue now, in any state (one listing)."""
        return self._names("requests")

    def read_each(self, uuids: Iterable[str]) -> list[JobRequest]:
        """The requests of ``uuids`` that are still there, read together (one round trip)."""
        return self._read(uuids)

    def _read_all(self) -> list[JobRequest]:
        return self._read(self._names("requests"))

    def _in_flight(self) -> tuple[set[str], set[str]]:
        """The names of the requests in flight and of the completed ones (two listings).

        The rule of the module docstring: a request without its result
        marker is in flight.
        """
        names = self._names("requests")
        done = names & self._names("results")
        return names - done, done

    def in_flight(self) -> list[JobRequest]:
        """Requests in flight (no result marker), read; completed ones are never read.

        A sweep reads these once and passes them to :meth:`pending` and
        :meth:`lost_requests`: both then look at the same read.
        """
        return self._read(self._in_flight()[0])

    def pending(self, in_flight: list[JobRequest] | None = None) -> list[JobRequest]:
        """REQUESTED requests, by precedence then age (sweeps re-nudge these).

        ``in_flight``: :meth:`in_flight` as already read (None: read it now).
        """
        read = self.in_flight() if in_flight is None else in_flight
        waiting = [r for r in read if r.state == RequestState.REQUESTED]
        return sorted(waiting, key=lambda r: (r.precedence, r.created))

    def all(self) -> list[JobRequest]:
        """Every request of the queue (lists and reads the whole queue)."""
        return self._read_all()

    def state_counts(self) -> dict[str, int]:
        """Requests by state; completed ones counted by their markers, not read (metrics)."""
        in_flight, done = self._in_flight()
        counts: dict[str, int] = {}
        for request in self._read(in_flight):
            counts[request.state.value] = counts.get(request.state.value, 0) + 1
        if done:
            counts[RequestState.COMPLETED.value] = len(done)
        return counts

    def active(self) -> list[JobRequest]:
        """Requests not COMPLETED yet (for status; reads only those)."""
        return [r for r in self.in_flight() if r.state != RequestState.COMPLETED]

    def lost_requests(self, in_flight: list[JobRequest] | None = None) -> list[JobRequest]:
        """RUNNING or PAUSED requests whose lock has no holder (their worker died).

        ``in_flight``: :meth:`in_flight` as already read (None: read it now).
        The locks are looked at now, after that read; a request that moved
        on since is not recovered (:meth:`recover_lost` checks its version).
        """
        read = self.in_flight() if in_flight is None else in_flight
        active = [r for r in read if r.state in (RequestState.RUNNING, RequestState.PAUSED)]
        checks = [(r, self.client.kazoo.exists_async(self._path("locks", r.uuid))) for r in active]
        return [r for r, result in checks if self.client.wait(result) is None]

    def cleanup(
        self,
        max_age: float,
        *,
        consumed_age: float | None = None,
        pending: Callable[[], set[str] | None] | None = None,
    ) -> list[str]:
        """Remove requests completed (or orphaned) over ``max_age`` seconds ago with no waiter.

        With ``consumed_age`` and ``pending``, also those completed over
        ``consumed_age`` seconds ago whose completion event is consumed:
        ``pending()`` names the requests whose events are still queued, read
        after the ages (an event is queued with its marker, so a marker
        older than the read and absent from it was consumed); None: unknown
        this time, nothing is taken for consumed.

        A completed request is aged by its result marker (one stat each, sent
        together, and once per process: a marker is never written again); no
        request is read: one without a marker is in flight. The old ones go
        in a few transactions (:meth:`remove_many`).
        """
        requests, results = self._names("requests"), self._names("results")
        listed = {child: self._names(child) for child in ("params", "result-data")}
        leftovers = (listed["params"] | listed["result-data"]) - requests
        waiters = self._names("waiters")
        completed = sorted(results - waiters)
        ages = self._completion_ages(completed)
        old = [uuid for uuid in completed if ages[uuid] >= max_age]
        if consumed_age is not None and pending is not None:
            young = [u for u in completed if consumed_age <= ages[u] < max_age]
            queued = pending() if young else None
            if queued is not None:
                old += [u for u in young if u not in queued]
        self.remove_many(old, results=results, listed=listed)
        stale = [u for u in sorted(leftovers - waiters - results) if self._age(u) >= max_age]
        for uuid in stale:
            self.remove(uuid)
        return old + stale

    def _completion_ages(self, completed: list[str]) -> dict[str, float]:
        """Seconds since each request completed, by its marker's time (inf: no marker)."""
        known = _completed_at.setdefault((id(self.client), self.root), {})
        for uuid in set(known) - set(completed):
            del known[uuid]  # removed: forgotten
        unknown = [u for u in completed if u not in known]
        stats = [self.client.kazoo.exists_async(self._path("results", u)) for u in unknown]
        for uuid, check in zip(unknown, stats, strict=True):
            stat = self.client.wait(check)
            if stat is not None:
                known[uuid] = stat.mtime / 1000.0
        now = time.time()
        return {u: now - known[u] if u in known else float("inf") for u in completed}

    def remove_many(
        self, uuids: list[str], *, results: set[str], listed: dict[str, set[str]]
    ) -> None:
        """:meth:`remove` of each, their plain nodes deleted together a few requests at a time.

        One transaction deletes the request, its marker and its params and
        result data of up to :data:`REMOVE_BATCH` requests (``results`` and
        ``listed``: the markers and the ``params``/``result-data`` names, as
        the caller just listed them). A request a transaction fails on (a
        flag under it, sharded data, a node gone meanwhile) is left to
        :meth:`remove`, and the others are tried again.
        """
        todo = list(uuids)
        for start in range(0, len(todo), REMOVE_BATCH):
            batch = todo[start : start + REMOVE_BATCH]
            while batch:
                failed = self._delete_together(batch, results, listed)
                if failed is None:
                    break
                self.remove(failed)  # its flags or shards, one request at a time
                batch.remove(failed)

    def _delete_together(
        self, batch: list[str], results: set[str], listed: dict[str, set[str]]
    ) -> str | None:
        """One transaction deleting ``batch``'s nodes; the request it failed on, if it did."""
        txn = Transaction(self.client)
        owner: dict[str, str] = {}
        for uuid in batch:
            nodes = [self._path("requests", uuid)]
            if uuid in results:
                nodes.append(self._path("results", uuid))
            nodes += [self._path(child, uuid) for child, names in listed.items() if uuid in names]
            for node in nodes:
                txn.delete(node)
                owner[node] = uuid
        try:
            txn.commit()
        except OpFailedError as exc:
            return owner.get(exc.path, batch[0])
        return None

    def _age(self, uuid: str) -> float:
        """Seconds since the newest write to any node of the request."""
        checks = [
            self.client.kazoo.exists_async(self._path(child, uuid))
            for child in ("requests", "params", "result-data", "results")
        ]
        stats = [self.client.wait(c) for c in checks]
        newest = max((s.mtime / 1000.0 for s in stats if s is not None), default=0.0)
        return time.time() - newest
