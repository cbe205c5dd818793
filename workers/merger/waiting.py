"""One fetch for the merges waiting: the changes of queued merge requests, fetched together.

A burst of new changes (twenty patchsets pushed at once, a gate filled in
one go) puts as many merge requests in the queue, one per item, and each
merge of a project begins with a fetch: the branches and the change's ref.
With the remote on the same host that fetch is two thirds of a no-op
merge's CPU (five git processes: the fetch, the remote's ``upload-pack``
and ``pack-objects``, ``unpack-objects`` and the connectivity check), and
it is the same fetch twenty times over.

So when a merge must fetch, it first looks at the queue (one listing) and
reads the waiting requests it has not read before (one pipelined round of
reads, at most :data:`MAX_READS`). The changes of those merge jobs that
touch the same repo, whose commits the cache lacks, ride along in the same
fetch, each into the ref its own job would have fetched it to
(``refs/sluice/jobs/<job id>/source-<i>``, entered in the repo's journal so
the window of kept refs counts it). When their turn comes, their commits
are in the cache.

**And their branches are fresh.** Every request in the listing was made
before the listing, and the fetch came after it, so the branches it
fetched are a state the remote had *after* each of those requests was
made: as good as what a fetch of its own would find (a merge runs some
time after its request anyway; Zuul's merger does the same, and so does a
merger that is simply busy). A later merge of one of those requests in
this process, with its commits in the cache, skips the fetch altogether
(no git process for it; the cat-file and update-ref processes are parked
between merges, :mod:`.parking`). Which requests
were listed is known only to the process that listed them (the memo is
per process, like the repo cache), so another merger process fetches as
before, and finds the commits already there. Nothing here uses a clock.

Everything here is an optimisation: a listing or a read that fails, a
request that does not decode, a combined fetch that fails (another
change's ref is gone) all fall back to the merge's own fetch, and the
failure of another request's ref is never this merge's (the engine
retries with its own refs only).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from dataclasses import dataclass
from typing import Protocol

from scheduler.processlocal import ProcessLocal
from scheduler.stores.job_requests import JobRequestQueue
from scheduler.stores.request_records import JobRequest, RequestState
from scheduler.wire.merger import InvalidRecordError, JobKind, MergeChange, MergeJob, read_params
from workers.merger.names import source_ref

log = logging.getLogger(__name__)

# Waiting requests read at most per listing (the rest wait for the next one).
MAX_READS = 32
# Requests remembered as read (their changes, or nothing), and as fresh per repo.
MAX_REMEMBERED = 2048

RepoKey = tuple[str, str]


@dataclass(frozen=True)
class WaitingChange:
    """A change of a waiting merge job (with its commit), as its own fetch would fetch it."""

    job_id: str
    index: int
    change: MergeChange

    @property
    def ref(self) -> str:
        """The ref the job's own fetch would write: the change's source ref."""
        return source_ref(self.job_id, self.index)


class WaitingMerges:
    """This process's memo: requests read (and what they want), requests fresh per repo."""

    def __init__(self) -> None:
        # uuid -> the changes of its merge job, by repo ((): not a waiting merge)
        self.read: OrderedDict[str, dict[RepoKey, tuple[WaitingChange, ...]]] = OrderedDict()
        # repo -> uuids of requests listed before a fetch of its branches in this process
        self.fresh: dict[RepoKey, set[str]] = {}

    def remember(self, uuid: str, wants: dict[RepoKey, tuple[WaitingChange, ...]]) -> None:
        self.read[uuid] = wants
        while len(self.read) > MAX_REMEMBERED:
            self.read.popitem(last=False)

    def forget(self) -> None:
        """Nothing is fresh any more (the repo cache was replaced)."""
        self.fresh.clear()

    def mark_fresh(self, key: RepoKey, uuids: set[str]) -> None:
        fresh = self.fresh.setdefault(key, set())
        if len(fresh) + len(uuids) > MAX_REMEMBERED:
            fresh.clear()  # forgetting costs a fetch, never a stale branch
        fresh |= uuids


_memos: ProcessLocal[str, WaitingMerges] = ProcessLocal("waiting merges")


def process_memo() -> WaitingMerges:
    """This process's memo (never inherited across a fork)."""
    return _memos.get("memo", WaitingMerges)


class Batch(Protocol):
    """What the engine (:func:`workers.merger.merge.run_merge_job`) asks, per repo.

    :meth:`fresh` before it fetches, :meth:`others` for what to fetch along,
    :meth:`fetched` once the branches came.
    """

    def fresh(self, key: RepoKey) -> bool: ...

    def others(self, key: RepoKey) -> list[WaitingChange]: ...

    def fetched(self, key: RepoKey) -> None: ...


class FetchBatch:
    """One merge request's view of the queue and of the memo: see the module docstring."""

    def __init__(self, queue: JobRequestQueue, uuid: str, memo: WaitingMerges) -> None:
        self.queue = queue
        self.uuid = uuid
        self.memo = memo
        # the other requests of this request's one listing (None: not listed yet),
        # made before any fetch that follows it, of whichever repo
        self._listed: set[str] | None = None

    def fresh(self, key: RepoKey) -> bool:
        """Whether this process fetched the branches of ``key`` after this request was made."""
        fresh = self.memo.fresh.get(key)
        if fresh is None or self.uuid not in fresh:
            return False
        fresh.discard(self.uuid)
        return True

    def others(self, key: RepoKey) -> list[WaitingChange]:
        """The changes for ``key`` of the other merge requests waiting (best-effort).

        The queue is listed once per request, before its first fetch: a job
        over several repos reads it once.
        """
        if self._listed is None:
            self._listed = self._list()
        found: list[WaitingChange] = []
        for uuid in self._listed:
            found.extend(self.memo.read.get(uuid, {}).get(key, ()))
        return found

    def _list(self) -> set[str]:
        """The other requests in the queue now, the unread ones read (empty on failure)."""
        unread: list[str] = []
        try:
            listed = self.queue.listed() - {self.uuid}
            unread = [u for u in listed if u not in self.memo.read]
            del unread[MAX_READS:]
            for request in self.queue.read_each(unread):
                self.memo.remember(request.uuid, _wanted(request))
        except Exception as exc:  # an optimisation: the merge fetches what it needs alone
            log.warning("merge request %s: waiting requests not read: %r", self.uuid, exc)
            for uuid in unread:  # not read again (a node that does not decode stays so)
                self.memo.read.setdefault(uuid, {})
            return set()
        return listed

    def fetched(self, key: RepoKey) -> None:
        """The branches of ``key`` were fetched just now: fresh for every request listed before."""
        if self._listed:
            self.memo.mark_fresh(key, self._listed)


class NoBatch:
    """No queue to look at (a replay, a test, the CLI): fetch as the job alone needs."""

    def fresh(self, key: RepoKey) -> bool:
        return False

    def others(self, key: RepoKey) -> list[WaitingChange]:
        return []

    def fetched(self, key: RepoKey) -> None:
        return None


NO_BATCH = NoBatch()


def _wanted(request: JobRequest) -> dict[RepoKey, tuple[WaitingChange, ...]]:
    """What a waiting merge request's fetch would fetch, by repo; empty for anything else."""
    if request.state != RequestState.REQUESTED or request.params is None:
        return {}
    try:
        kind, params = read_params(request.params)
        if kind is not JobKind.MERGE:
            return {}
        job = MergeJob.from_dict(params)
    except InvalidRecordError:
        return {}  # its own merge reports what is wrong with it
    wants: dict[RepoKey, list[WaitingChange]] = {}
    for index, change in enumerate(job.changes):
        if change.commit:  # without one, its own merge could not tell it is here
            wanted = WaitingChange(job.job_id, index, change)
            wants.setdefault((change.connection, change.project), []).append(wanted)
    return {key: tuple(changes) for key, changes in wants.items()}
