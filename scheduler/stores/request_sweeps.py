"""The ending side of a job request queue: removal, counts and the sweeps' reads.

:class:`RequestSweeps` is a base of :class:`~scheduler.stores.job_requests.JobRequestQueue`;
it holds what the maintenance sweep, the metrics, ``sluice wait --idle`` and
the submitters' clean-up call, apart from the submit/claim/complete path.

**In flight.** Every COMPLETED request has its ``results/<uuid>`` marker,
created in the completing transaction and deleted with the request in one
transaction (:meth:`RequestSweeps.remove`). So the requests in flight are
the requests minus the markers: :meth:`RequestSweeps.active_count` counts
them by two stats, :meth:`RequestSweeps._in_flight` names them by two
listings. Completed requests stay a day (for their submitters and
replays); the sweeps and metrics never read them, so their cost follows
the work in flight, not the history.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable

from kazoo.exceptions import NoNodeError

from scheduler.stores.request_records import JobRequest, RequestState
from scheduler.zk import paths, stored
from scheduler.zk.client import ZooKeeperClient
from scheduler.zk.context import OpFailedError, Transaction


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

    def _read_active(self) -> list[JobRequest]:
        """Requests in flight (not COMPLETED), read; completed ones are never read."""
        return self._read(self._in_flight()[0])

    def pending(self) -> list[JobRequest]:
        """REQUESTED requests, by precedence then age (sweeps re-nudge these)."""
        waiting = [r for r in self._read_active() if r.state == RequestState.REQUESTED]
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
        return [r for r in self._read_active() if r.state != RequestState.COMPLETED]

    def lost_requests(self) -> list[JobRequest]:
        """RUNNING or PAUSED requests whose lock has no holder (their worker died)."""
        active = [
            r for r in self._read_active() if r.state in (RequestState.RUNNING, RequestState.PAUSED)
        ]
        checks = [(r, self.client.kazoo.exists_async(self._path("locks", r.uuid))) for r in active]
        return [r for r, result in checks if self.client.wait(result) is None]

    def cleanup(self, max_age: float) -> list[str]:
        """Remove requests completed (or orphaned) over ``max_age`` seconds ago with no waiter.

        A completed request is aged by its result marker (one stat each, sent
        together); no request is read: one without a marker is in flight.
        """
        requests, results = self._names("requests"), self._names("results")
        leftovers = (self._names("params") | self._names("result-data")) - requests
        waiters = self._names("waiters")
        completed = sorted(results - waiters)
        stats = [self.client.kazoo.exists_async(self._path("results", u)) for u in completed]
        now = time.time()
        old = [
            uuid
            for uuid, check in zip(completed, stats, strict=True)
            if (stat := self.client.wait(check)) is None or now - stat.mtime / 1000.0 >= max_age
        ]
        old += [u for u in sorted(leftovers - waiters - results) if self._age(u) >= max_age]
        for uuid in old:
            self.remove(uuid)
        return old

    def _age(self, uuid: str) -> float:
        """Seconds since the newest write to any node of the request."""
        checks = [
            self.client.kazoo.exists_async(self._path(child, uuid))
            for child in ("requests", "params", "result-data", "results")
        ]
        stats = [self.client.wait(c) for c in checks]
        newest = max((s.mtime / 1000.0 for s in stats if s is not None), default=0.0)
        return time.time() - newest
