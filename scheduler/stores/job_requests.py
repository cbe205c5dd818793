"""Job request queues: the executor (unzoned and per zone) and merger queues.

Layout under a queue root (:func:`scheduler.zk.paths.executor_queue`,
:func:`scheduler.zk.paths.merger_queue`), as in seed 000:

=====================  ====================================================
``requests/<uuid>``    the request (:class:`JobRequest`, small JSON); its
                       children ``cancel`` and ``resume`` are flags the
                       submitter sets without touching the locked request
``locks/<uuid>``       side-channel claim: ONE ephemeral node (data: the
                       worker), created in the claim transaction
``params/<uuid>``      parameters over ``PARAMS_INLINE_BYTES``, sharded;
                       smaller ones travel in the request node (``params``)
``result-data/<uuid>`` the result, sharded, written before the marker
``results/<uuid>``     small marker that the result is complete (watched)
``waiters/<uuid>``     ephemeral: a submitter still wants the result
=====================  ====================================================

States (:class:`RequestState`): REQUESTED -> RUNNING (claim) ->
[PAUSED -> RUNNING (resume)] -> COMPLETED; HOLD is a REQUESTED that cannot
be claimed until released (tests, debugging).

Round trips of one lifecycle: submit 1 (one transaction: request with its
params inline, or params + request [+ waiter]); claim 2 (read, then one
transaction: create the lock, set RUNNING, queue the "started" event; a
read more after a lost answer); the worker's params 0 when inline, else 1;
complete 1 (one fenced transaction: set COMPLETED, write the result data and
its marker, queue the "completed" event, delete the lock; shards first only
when the result is over ~900 kB); read the result 1-2. Nothing on this path lists a directory (a
merger's look at what else waits, :meth:`listed`, is apart from it).

Guarantees:

* A claim is a single ephemeral create that fails if the node exists, in
  the same transaction as the REQUESTED -> RUNNING compare-and-set: a
  second (duplicate) claim returns ``None`` and changes nothing.
* Every update of a claimed request is fenced by its lock node: a worker
  whose session expired cannot overwrite the request, even if it does not
  know yet (docs/architecture.md invariant 3).
* COMPLETED, the result and the result event commit in one transaction:
  the scheduler never sees a completed request without its event, nor an
  event without its result.
* :meth:`JobRequestQueue.lost_requests` (:mod:`scheduler.stores.request_sweeps`,
  with removal and the counts of requests in flight) finds RUNNING/PAUSED requests with
  no lock (the claimer died: its session expired and took the lock);
  :meth:`JobRequestQueue.recover_lost` completes one with a ``lost``
  result and event, atomically with proving that nobody holds it.
* A submitter waiting for a result is woken by a watch on ``results/<uuid>``.

On SUSPENDED a worker must stop reporting (its context is invalid) and may
continue if the session survives; on LOST its lock is gone, every later
update raises :class:`~scheduler.zk.errors.LockLostError`, and the request
will be found by ``lost_requests()`` and retried by the pipeline.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from kazoo.exceptions import NoNodeError
from kazoo.protocol.states import EventType

from scheduler.stores.request_records import JobRequest, RequestState
from scheduler.stores.request_sweeps import RequestSweeps
from scheduler.wire.events import JobResult, RequestEvent, RequestMessage
from scheduler.zk import paths, sharding, stored
from scheduler.zk.client import ZooKeeperClient
from scheduler.zk.context import (
    BAD_VERSION,
    EXISTS,
    NO_NODE,
    LockContext,
    OpFailedError,
    Transaction,
)
from scheduler.zk.errors import DataTooLargeError, LockLostError, NoDataError
from scheduler.zk.event_queue import EventQueue, commit_creating_parents
from scheduler.zk.locks import HeldLock
from scheduler.zk.retry import OUTAGE

__all__ = [
    "MAX_REQUEST_BYTES",
    "ClaimedRequest",
    "JobRequest",
    "JobRequestQueue",
    "RequestState",
]

MAX_REQUEST_BYTES = 64 * 1024
# Parameters up to this size (encoded) are stored in the request node itself:
# the claim's read of the request brings them, saving the worker a read.
PARAMS_INLINE_BYTES = 16 * 1024


class ClaimedRequest:
    """A request this worker claimed; every update goes through its fenced context."""

    def __init__(self, request: JobRequest, lock: HeldLock, flagged: bool = True) -> None:
        self.request = request
        self.lock = lock
        # a flag (``cancel``, ``resume``) was there when the request was read
        # for the claim; True when that is not known
        self.flagged = flagged

    @property
    def uuid(self) -> str:
        return self.request.uuid

    @property
    def context(self) -> LockContext:
        return self.lock.context


# bytes of encoded result a completion event carries (beyond: read from the queue)
EVENT_RESULT_LIMIT = 8 * 1024


class JobRequestQueue(RequestSweeps):
    """One job request queue (executor unzoned, an executor zone, or merger)."""

    def __init__(self, client: ZooKeeperClient, root: str) -> None:
        self.client = client
        self.root = root
        self._ensured = False

    def ensure(self) -> None:
        if not self._ensured:
            for child in paths.REQUEST_CHILDREN:
                self.client.ensure_path(paths.request_child(self.root, child))
            self._ensured = True

    def _encode(self, request: JobRequest) -> bytes:
        data = stored.encode(request.to_dict())
        if len(data) > MAX_REQUEST_BYTES:
            raise DataTooLargeError(
                f"request {request.uuid} is {len(data)} bytes; put large data in params"
            )
        return data

    def _event(
        self,
        request: JobRequest,
        kind: RequestEvent,
        txn: Transaction,
        outcome: JobResult | None = None,
    ) -> list[EventQueue]:
        if not request.result_queue:
            return []
        queue = EventQueue(self.client, request.result_queue)
        message = RequestMessage(
            kind,
            self.root,
            request.uuid,
            request.buildset_uuid,
            request.job_name,
            request.worker,
            outcome,
            time.time(),
        )
        queue.put_ops(message.to_dict(), txn)
        return [queue]

    # ------------------------------------------------------------ submitter side

    def submit(
        self, request: JobRequest, params: Mapping[str, Any], *, wait: bool = False
    ) -> JobRequest:
        """Create the request and its parameters; ``wait`` registers this session as a waiter.

        One transaction. The queue's directories are created on first need
        (a failed commit), not checked on every submit.
        """
        request, prepared = self._with_params(request, params)
        for attempt in range(2):
            txn = Transaction(self.client)
            if prepared is not None:
                prepared.add_to(txn)
            txn.create(self._path("requests", request.uuid), self._encode(request))
            if wait:
                txn.create(self._path("waiters", request.uuid), b"", ephemeral=True)
            try:
                txn.commit()
                return replace(request, version=0)
            except OpFailedError as exc:
                if exc.reason == NO_NODE and attempt == 0:
                    self._ensured = False
                    self.ensure()
                    continue
                # A retried submit whose first attempt did commit: same request, no effect.
                existing = self.get(request.uuid) if exc.reason == EXISTS else None
                if existing is None:
                    raise
                return existing
        raise AssertionError("unreachable")

    def submit_ops(
        self, request: JobRequest, params: Mapping[str, Any], txn: Transaction
    ) -> JobRequest:
        """Write the parameters (shards first) and add the request's create to ``txn``.

        For a submitter that must create the request in the same transaction
        as other state (the scheduler's pipeline pass: the request exists if
        and only if the pass that decided it committed). The queue's
        directories must exist (:meth:`ensure`).
        """
        self.ensure()
        request, prepared = self._with_params(request, params)
        if prepared is not None:
            prepared.add_to(txn)
        txn.create(self._path("requests", request.uuid), self._encode(request))
        return replace(request, version=0)

    def _with_params(
        self, request: JobRequest, params: Mapping[str, Any]
    ) -> tuple[JobRequest, sharding.PreparedBlob | None]:
        """The request to create (dated, small params inline) and a params node to write."""
        if not request.created:
            request = replace(request, created=time.time())
        if len(stored.encode(params)) <= PARAMS_INLINE_BYTES:
            return replace(request, params=dict(params)), None
        path = self._path("params", request.uuid)
        return request, stored.prepare(LockContext(self.client), path, params, exists=False)

    def get(self, uuid: str) -> JobRequest | None:
        read = self._read_one(uuid)
        return None if read is None else read[0]

    def _read_one(self, uuid: str) -> tuple[JobRequest, int] | None:
        """The request and how many flags it has (its children), or None if gone."""
        path = self._path("requests", uuid)
        try:
            raw, stat = self.client.get(path)
        except NoNodeError:
            return None
        return JobRequest.from_dict(stored.decode(raw, path), stat.version), stat.numChildren

    def request_cancel(self, uuid: str) -> bool:
        """Ask the worker to cancel (the ``cancel`` flag); False if the request is gone."""
        return self._set_flag(uuid, "cancel")

    def resume_ops(self, uuid: str, txn: Transaction) -> bool:
        """Add the creation of the ``resume`` flag to ``txn``; False if the request is gone.

        The scheduler commits it with the state that records the resume, so
        a crash can neither lose the resume nor ask twice.
        """
        if self.client.exists(self._path("requests", uuid)) is None:
            return False
        flag = paths.request_flag(self.root, uuid, "resume")
        if self.client.exists(flag) is None:  # set already (by hand): creating it would fail
            txn.create(flag)
        return True

    def request_resume(self, uuid: str) -> bool:
        return self._set_flag(uuid, "resume")

    def _set_flag(self, uuid: str, flag: str) -> bool:
        txn = Transaction(self.client)
        txn.create(paths.request_flag(self.root, uuid, flag))
        try:
            txn.commit()
        except OpFailedError as exc:
            if exc.reason == EXISTS:
                return True
            if exc.reason == NO_NODE:
                return False
            raise
        return True

    def release_hold(self, uuid: str) -> bool:
        """HOLD -> REQUESTED; False if the request is not on hold."""
        request = self.get(uuid)
        if request is None or request.state != RequestState.HOLD:
            return False
        txn = Transaction(self.client)
        updated = replace(request, state=RequestState.REQUESTED)
        txn.set(self._path("requests", uuid), self._encode(updated), request.version)
        try:
            txn.commit()
        except OpFailedError:
            return False
        return True

    def get_result(self, uuid: str) -> JobResult | None:
        """The result if the request completed (the marker exists), else None."""
        marker = self.client.kazoo.get_async(self._path("results", uuid))
        data = self.client.kazoo.get_async(self._path("result-data", uuid))
        try:
            raw_marker, _ = self.client.wait(marker)
        except NoNodeError:
            return None
        info = stored.decode(raw_marker)
        try:
            raw, _ = self.client.wait(data)
        except NoNodeError:
            return None
        path = self._path("result-data", uuid)
        if sharding.decode_pointer(path, raw) is not None:
            raw = sharding.read(self.client, path).data
        document = stored.decode(raw, path)
        return JobResult(
            uuid, dict(document.get("result", {})), float(info["completed"]), bool(info["lost"])
        )

    def wait_for_result(self, uuid: str, timeout: float) -> JobResult | None:
        """Block until the result exists (a watch wakes us, no polling) or ``timeout``."""
        ready = threading.Event()
        if self.client.exists(self._path("results", uuid), watch=lambda _e: ready.set()) is None:
            ready.wait(timeout)
        return self.get_result(uuid)

    # ------------------------------------------------------------ worker side

    def params(self, request: JobRequest | str) -> dict[str, Any]:
        """The request's parameters (:class:`~scheduler.zk.errors.NoDataError` if removed).

        Given the request as read (a claim's), small parameters cost no read.
        """
        if isinstance(request, str):
            found = self.get(request)
            if found is None:
                raise NoDataError(f"request {request} is gone")
            request = found
        if request.params is not None:
            return dict(request.params)
        uuid = request.uuid
        document = stored.load(LockContext(self.client), self._path("params", uuid)).data
        document.pop(stored.SCHEMA_FIELD, None)
        return document

    def claim(self, uuid: str, worker: str) -> ClaimedRequest | None:
        """Claim a REQUESTED request for ``worker``; None if it is claimed, gone or not ready.

        Retried through brief outages (:data:`~scheduler.zk.retry.OUTAGE`).
        A claim whose answer was lost (the connection dropped after the
        server committed it, as in an ensemble election) is recognised on
        the retry: the request is RUNNING for ``worker`` and its lock is
        this session's. Without that, the request would stay RUNNING under
        a live lock that nobody runs, and no sweep would ever free it.
        """
        lock_path = self._path("locks", uuid)
        tries = 0

        def attempt() -> ClaimedRequest | None:
            nonlocal tries
            tries += 1
            read = self._read_one(uuid)
            if read is None:
                return None
            request, flags = read
            if tries > 1 and self._claimed_before(request, worker, lock_path):
                return ClaimedRequest(request, HeldLock(self.client, lock_path, lock_path))
            if request.state != RequestState.REQUESTED:
                return None
            return self._claim(request, worker, lock_path, flagged=flags > 0)

        return OUTAGE(attempt)

    def _claimed_before(self, request: JobRequest, worker: str, lock_path: str) -> bool:
        """Did an earlier, unanswered attempt of this session claim ``request``?"""
        if request.state != RequestState.RUNNING or request.worker != worker:
            return False
        stat = self.client.exists(lock_path)
        return stat is not None and stat.ephemeralOwner == self.client.session_id

    def _claim(
        self, request: JobRequest, worker: str, lock_path: str, *, flagged: bool
    ) -> ClaimedRequest | None:
        uuid = request.uuid
        running = replace(request, state=RequestState.RUNNING, worker=worker)
        txn = Transaction(self.client)
        txn.create(lock_path, worker.encode(), ephemeral=True)
        txn.set(self._path("requests", uuid), self._encode(running), request.version)
        queues = self._event(running, RequestEvent.STARTED, txn)
        try:
            commit_creating_parents(self.client, txn, queues)
        except OpFailedError as exc:
            if exc.reason in (EXISTS, BAD_VERSION, NO_NODE):
                return None
            raise
        lock = HeldLock(self.client, lock_path, lock_path)
        return ClaimedRequest(replace(running, version=request.version + 1), lock, flagged)

    def _update(
        self,
        claimed: ClaimedRequest,
        state: RequestState,
        event: RequestEvent | None,
        data: Mapping[str, Any] | None = None,
    ) -> None:
        updated = replace(claimed.request, state=state)
        txn = claimed.context.transaction()
        txn.set(
            self._path("requests", claimed.uuid), self._encode(updated), claimed.request.version
        )
        prepared = None
        if data is not None:
            data_path = self._path("result-data", claimed.uuid)
            exists = self.client.exists(data_path) is not None
            prepared = stored.prepare(LockContext(self.client), data_path, data, exists=exists)
            prepared.add_to(txn)
        if state == RequestState.RUNNING and self.client.exists(
            paths.request_flag(self.root, claimed.uuid, "resume")
        ):
            txn.delete(paths.request_flag(self.root, claimed.uuid, "resume"))
        queues = self._event(updated, event, txn) if event else []
        results = commit_creating_parents(self.client, txn, queues)
        if prepared is not None:
            prepared.cleanup(self.client, results)
        claimed.request = replace(updated, version=claimed.request.version + 1)

    def pause(self, claimed: ClaimedRequest, result_data: Mapping[str, Any] | None = None) -> None:
        """RUNNING -> PAUSED with its result data so far and a ``request-paused`` event.

        The data goes to the request's ``result-data`` node (as ``paused``) in
        the same fenced transaction; the completion replaces it later.
        """
        data = {"paused": dict(result_data or {})}
        self._update(claimed, RequestState.PAUSED, RequestEvent.PAUSED, data)

    def prefail(self, claimed: ClaimedRequest) -> bool:
        """Queue a ``request-prefailed`` event (its output matched the job's failure-output).

        Fenced by the claim's lock: False, and nothing written, once the
        request completed or the claim was lost (its completion says the
        rest). The request itself does not change; the pipeline applies the
        event once (a repeated one finds the build pre-failed already).
        """
        try:
            txn = claimed.context.transaction()
            queues = self._event(claimed.request, RequestEvent.PREFAILED, txn)
            if not queues:
                return False
            commit_creating_parents(self.client, txn, queues)
        except LockLostError:  # completed (the lock is gone) or lost
            return False
        return True

    def paused_data(self, uuid: str) -> dict[str, Any]:
        """The result data a paused request stored ({} if none or already completed)."""
        try:
            document = stored.load(LockContext(self.client), self._path("result-data", uuid)).data
        except NoDataError:
            return {}
        paused = document.get("paused")
        return dict(paused) if isinstance(paused, Mapping) else {}

    def resume(self, claimed: ClaimedRequest) -> None:
        """PAUSED -> RUNNING, consuming the ``resume`` flag (fenced)."""
        self._update(claimed, RequestState.RUNNING, None)

    def flag_set(self, uuid: str, flag: str) -> bool:
        """Is the ``cancel``/``resume`` flag of the request set?"""
        return self.client.exists(paths.request_flag(self.root, uuid, flag)) is not None

    def watch_flag(
        self, uuid: str, flag: str, seen: threading.Event | None = None
    ) -> threading.Event:
        """An event set once the ``cancel``/``resume`` flag appears (a watch, re-armed).

        The watch is on the request's children, not on the flag's own path:
        an ``exists`` watch on a flag that never comes (most builds are never
        cancelled) stays registered, in ZooKeeper and in kazoo, until the
        session ends: one more a build for as long as an executor runs. A
        children watch fires when the request is removed too, and is not
        armed again then, so at most one is left per live request. ``seen``:
        the event to set (a new one by default).
        """
        seen = threading.Event() if seen is None else seen
        paths.request_flag(self.root, uuid, flag)  # an unknown flag is refused
        request = self._path("requests", uuid)

        def found(result: Any) -> None:
            # NoNode: the request is gone, and ZooKeeper left no watch on it
            if result.successful() and flag in result.get():
                seen.set()

        def watcher(event: Any) -> None:
            # Never block kazoo's callback thread: re-arm asynchronously.
            if not seen.is_set() and event.type != EventType.DELETED:
                self.client.kazoo.get_children_async(request, watch=watcher).rawlink(found)

        try:
            children = self.client.get_children(request, watch=watcher)
        except NoNodeError:
            return seen  # gone: the flag can no longer come
        if flag in children:
            seen.set()
        return seen

    def _commit_completion(
        self,
        request: JobRequest,
        result: Mapping[str, Any],
        make_txn: Callable[[], Transaction],
        *,
        lock_path: str,
        lost: bool,
    ) -> None:
        """COMPLETED, result data, marker, event and unlock, in one transaction.

        A lost request (``lost``) gets its lock created at the start of the
        same transaction, proving that nobody holds it.
        """
        data_path = self._path("result-data", request.uuid)
        data_exists = False  # leftovers of an interrupted attempt are found by the first try
        completed = replace(request, state=RequestState.COMPLETED)
        for attempt in range(2):
            txn = make_txn()
            if lost:
                txn.create(lock_path, b"recover", ephemeral=True)
            txn.set(self._path("requests", request.uuid), self._encode(completed), request.version)
            prepared = stored.prepare(
                LockContext(self.client), data_path, {"result": dict(result)}, exists=data_exists
            )
            prepared.add_to(txn)
            moment = time.time()
            marker = stored.encode({"completed": moment, "lost": lost})
            txn.create(self._path("results", request.uuid), marker)
            carried = JobResult(request.uuid, dict(result), moment, lost)
            small = len(stored.encode({"result": carried.result})) <= EVENT_RESULT_LIMIT
            queues = self._event(completed, RequestEvent.COMPLETED, txn, carried if small else None)
            txn.delete(lock_path)
            try:
                results = commit_creating_parents(self.client, txn, queues)
            except OpFailedError as exc:
                if attempt == 0 and exc.reason == EXISTS and exc.path == data_path:
                    data_exists = True
                    continue
                raise
            prepared.cleanup(self.client, results)
            return

    def complete(self, claimed: ClaimedRequest, result: Mapping[str, Any]) -> bool:
        """COMPLETED + result + event + unlock in one fenced transaction.

        False if the request was removed meanwhile (cancelled and deleted
        by the scheduler): the lock is released and nothing is written. If
        it raises :class:`~scheduler.zk.errors.ZooKeeperUnavailableError`,
        whether it committed is unknown: :meth:`get_result` tells.
        """
        try:
            self._commit_completion(
                claimed.request,
                result,
                claimed.context.transaction,
                lock_path=claimed.lock.node,
                lost=False,
            )
        except OpFailedError as exc:
            requests_dir = paths.request_child(self.root, "requests") + "/"
            if exc.reason != NO_NODE or not exc.path.startswith(requests_dir):
                raise
            claimed.lock.release()
            return False
        claimed.context.mark_released()
        return True

    def release(self, claimed: ClaimedRequest) -> None:
        """Give up a claim without completing (the request stays RUNNING: it becomes lost)."""
        claimed.lock.release()

    def recover_lost(self, request: JobRequest) -> bool:
        """Complete a lost request with ``{"result": "LOST"}`` and its event.

        One transaction creates and deletes the lock node (proving nobody
        holds it) and completes the request; False if it was claimed,
        updated or removed meanwhile.
        """
        try:
            self._commit_completion(
                request,
                {"result": "LOST"},
                lambda: Transaction(self.client),
                lock_path=self._path("locks", request.uuid),
                lost=True,
            )
        except OpFailedError as exc:
            if exc.reason in (EXISTS, BAD_VERSION, NO_NODE):
                return False
            raise
        return True
