"""The build task's ZooKeeper side: claim a build request, run it, store its result.

:func:`execute_request` is what the Celery task ``sluice.executor.build``
(``tasks/executor.py``) calls; it is plain Python that tests drive against a
real ZooKeeper without a broker. One call:

1. **claim** the request: one transaction creates the ephemeral
   ``locks/<uuid>`` node, sets REQUESTED -> RUNNING and queues the
   ``request-started`` event. No claim (another delivery has it, or it is
   completed, on hold or gone) returns :attr:`Delivery.DUPLICATE` and
   changes nothing: a duplicate Celery delivery has no effect (docs/architecture.md
   invariant 4).
2. **read the spec**: the request's params are a :class:`BuildSpec`, the
   frozen job as the scheduler froze it and its build's context; params
   that are not one complete the request with ``ERROR``.
3. **accept the nodes** of a job with a nodeset (the context's ``node_request``):
   their locks are held by this session for the build's life, and they are
   returned (``used``) after it, whatever its end; nodes that cannot be
   had end the build ``NODE_FAILURE``.
4. **run** :func:`run_build` with a :class:`RequestControl`: a cancel is
   the ``cancel`` flag (kept by a watch armed half a second after the
   claim, no round trip per poll) or the claim no longer being valid; a
   pause goes through the queue.
5. **complete**: one fenced transaction stores the result, sets COMPLETED,
   queues ``request-completed`` and deletes the lock.

Guarantees when ZooKeeper misbehaves:

* **Session lost** (LOST, replaced, or the watchdog says ZooKeeper has not
  answered for two thirds of the session timeout): the lock is gone or may
  be, so the build stops as if cancelled and the fenced completion is
  refused (:attr:`Delivery.LOCK_LOST`). The request stays RUNNING
  without a lock; the sweep records it as LOST and the pipeline retries it.
* **SUSPENDED** (the connection dropped, the session may survive): the build
  keeps running until the watchdog window passes; its lock survives a short
  disconnect.
* **ZooKeeper unavailable at completion**: the completion is retried a few
  times; if it still fails, or anything else fails after the claim, the
  claim is released so the request becomes lost (recorded LOST by the
  sweep) rather than RUNNING forever under a live session's lock, and the
  error propagates (the task retries; the retry finds nothing to claim).

The build does not depend on its Celery message: the task is acknowledged
before it runs (docs/celery.md), and a dead worker is found through its
lost ZooKeeper session, not through broker redelivery.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import weakref
from collections.abc import Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from scheduler import logcontext
from scheduler.model.results import Result
from scheduler.nudge.task_labels import outcome_label, request_label
from scheduler.settings.sections import Settings
from scheduler.stores.autoholds import AutoholdStore
from scheduler.stores.job_requests import ClaimedRequest, JobRequest, JobRequestQueue
from scheduler.stores.keystore import KeyStore
from scheduler.stores.node_records import NodeStoreError
from scheduler.stores.nodes import HeldNode, NodeStore
from scheduler.wire.build_result import PHASES, BuildResult, Phase
from scheduler.wire.build_spec import BuildSpec
from scheduler.zk import paths
from scheduler.zk.client import ZooKeeperClient
from scheduler.zk.errors import (
    ConflictError,
    DecodeError,
    NoDataError,
    ZooKeeperError,
    ZooKeeperUnavailableError,
)
from workers import claims, later
from workers.claims import Delivery, briefly_suspended
from workers.executor import speculation
from workers.executor.control import BaseControl, StartedInfo
from workers.executor.errors import BuildSpecError, WorkspaceError
from workers.executor.job import steps
from workers.executor.playbooks import is_playbook
from workers.executor.runner import RunnerOptions, run_build
from workers.executor.secrets import SecretError, decrypt_secrets
from workers.executor.workspace import BuildLayout, remove_workspace
from workers.later import DelayedCall
from workers.merger.cache import RepoCache
from workers.nodekey import NodeKeyError, ensure_node_key, node_key_path
from workers.notify import (
    STARTED_NUDGE_DELAY,
    LaterNudge,
    Notify,
    Progress,
    no_notify,
    no_progress,
    notify_safely,
    progress_safely,
)

log = logging.getLogger(__name__)

# Seconds after the claim that a build's cancel watch is armed (a shorter
# build costs no request for it), and between attempts when ZooKeeper fails.
CANCEL_WATCH_DELAY = 0.5
CANCEL_WATCH_RETRY = 1.0

# Attempts at the completion transaction while ZooKeeper is unavailable, and
# the pause before the first retry (doubled each time).


@dataclass(frozen=True)
class ExecutionReport:
    """The task's return value: small, JSON-friendly, for Flower and tests."""

    request_uuid: str
    outcome: Delivery
    result: Result | None = None
    worker: str = ""
    # what the request is about (scheduler.nudge.task_labels), as the task's arguments say it
    about: str = ""

    def to_dict(self) -> dict[str, Any]:
        result = "" if self.result is None else self.result.value
        return {
            "summary": outcome_label(self.outcome.value, self.about, result),
            "request": self.request_uuid,
            "outcome": self.outcome.value,
            "result": None if self.result is None else self.result.value,
            "worker": self.worker,
        }


def worker_name(node: str | None = None) -> str:
    """How a claim names this process: the Celery node (or host) and the pid."""
    return f"{node or socket.gethostname()}:{os.getpid()}"


def runner_options(settings: Settings) -> RunnerOptions:
    """The runner's options from ``sluice.yaml``: ``state_dir`` and the ``executor:`` section."""
    executor = settings.executor
    return RunnerOptions(
        state_dir=settings.state_dir,
        poll_interval=executor.poll_interval,
        kill_grace=executor.kill_grace,
        tail_lines=executor.tail_lines,
        result_data_limit=executor.result_data_limit,
        share_objects=executor.share_objects,
        log_limit=executor.log_limit or None,
        sandbox=executor.sandbox,
        sandbox_writable=executor.sandbox_writable,
        sandbox_network=executor.sandbox_network,
        sandbox_limits=executor.sandbox_limits,
        hidden=secret_files(settings),
        keystore_password=settings.keystore.password,
        connections=settings.connections,
        merge_here=executor.merge_here,
        build_dir=executor.build_dir,
        recycle_workspaces=executor.recycle_workspaces,
        node_key=node_key_path(settings),
    )


def secret_files(settings: Settings) -> tuple[Path, ...]:
    """What a sandboxed job must not read: ``sluice.yaml`` and the files of keys it names."""
    found: list[str | None] = [str(settings.source) if settings.source else None]
    for tls in (settings.zookeeper.tls, settings.broker.tls):
        if tls is not None:
            found += [tls.ca, tls.cert, tls.key]
    found += [a.public_key for a in settings.web.authenticators]
    auth = settings.zookeeper.auth
    zookeeper_password = auth.password_file if auth is not None else None
    for path in (
        settings.broker.password_file,
        settings.flower.basic_auth_file,
        zookeeper_password,
    ):
        found.append(str(path) if path is not None else None)
    keystore = settings.keystore.password_file
    found.append(str(keystore) if keystore is not None else None)
    found.append(str(node_key_path(settings)))  # playbooks get an agent, never the key
    for connection in settings.connections.values():
        found.append(str(connection.options.get("app_key") or "") or None)
    return tuple(Path(p) for p in found if p)


def open_queue(client: ZooKeeperClient, zone: str | None = None) -> JobRequestQueue:
    """The executor request queue of ``zone`` (``None``: the unzoned queue)."""
    return JobRequestQueue(client, paths.executor_queue(zone))


def claim_lost(client: ZooKeeperClient, claimed: ClaimedRequest) -> str | None:
    """Why this worker may no longer act on ``claimed``, or None while it may.

    The claim's context decides, except that a SUSPENDED connection of the
    claim's own session counts as held until the watchdog window (two thirds
    of the session timeout) passes: the session, and the lock, may survive a
    short disconnect.
    """
    context = claimed.context
    reason = context.lost_reason()
    if reason is None or briefly_suspended(client, claimed):
        return None
    return reason


class RequestControl(BaseControl):
    """:class:`~workers.executor.control.BuildControl` on a claimed request.

    ``cancel_requested`` reads an event set by a watch on the ``cancel`` flag
    and the claim's lock context: both are local reads, no round trip.

    The watch is armed :data:`CANCEL_WATCH_DELAY` after the claim, so the
    many builds shorter than that cost no request for it; a cancel that
    comes sooner is seen when the watch is armed (it finds the flag there).
    A request that held a flag when it was read for the claim (cancelled
    while it waited in the queue) is watched at once, so it never starts
    its job. :meth:`close` drops a watch not yet armed.
    """

    def __init__(
        self,
        queue: JobRequestQueue,
        claimed: ClaimedRequest,
        *,
        poll_interval: float = 0.2,
        notify: Notify = no_notify,
        progress: Progress = no_progress,
    ) -> None:
        self.queue = queue
        self.claimed = claimed
        self.poll_interval = poll_interval
        self.notify = notify
        self.progress = progress
        self.began = time.monotonic()
        self.cancel_flag = threading.Event()
        self._arming: DelayedCall | None = None
        self._closed = False
        if claimed.flagged:
            queue.watch_flag(claimed.uuid, "cancel", self.cancel_flag)
        else:
            self._arm_later(CANCEL_WATCH_DELAY)
        self.info: StartedInfo | None = None
        # Why the build was stopped for a lost claim (None: it was not).
        self.stopped_for: str | None = None

    def _arm_later(self, delay: float) -> None:
        self._arming = later.call_later(delay, self._arm, name="cancel watch")

    def _arm(self) -> None:
        if self._closed:
            return
        try:
            self.queue.watch_flag(self.claimed.uuid, "cancel", self.cancel_flag)
        except ZooKeeperError as exc:  # try again; the lost claim is noticed on its own
            log.warning("build request %s: cancel watch not set: %s", self.claimed.uuid, exc)
            self._arm_later(CANCEL_WATCH_RETRY)

    def close(self) -> None:
        """The build is over: a watch not armed yet never will be."""
        self._closed = True
        if self._arming is not None:
            self._arming.cancel()

    def claim_lost(self) -> str | None:
        """Why this worker may no longer act on its claim, or None while it may."""
        return claim_lost(self.queue.client, self.claimed)

    def cancel_requested(self) -> bool:
        if self.cancel_flag.is_set():
            return True
        reason = self.claim_lost()
        if reason is None:
            return False
        if self.stopped_for is None:
            self.stopped_for = reason
            log.warning("build request %s: stopping, claim lost: %s", self.claimed.uuid, reason)
        return True

    def on_started(self, info: StartedInfo) -> None:
        self.info = info
        log.info("build request %s: started, log %s", self.claimed.uuid, info.log_path)
        self._progress("started")

    def on_phase(self, phase: Phase) -> None:
        self._progress(phase.value)

    def _progress(self, phase: str) -> None:
        request = self.claimed.request
        meta = {
            "phase": phase,
            "elapsed": round(time.monotonic() - self.began, 3),
            "about": request_label(request),
            "tenant": request.tenant,
            "project": request.info.get("project", ""),
            "job": request.job_name,
        }
        if "estimate" in request.info:  # the scheduler's (scheduler/reporting/estimates.py)
            meta["estimate"] = request.info["estimate"]
        progress_safely(self.progress, meta)

    def on_pre_fail(self, line: str) -> None:
        """Tell the pipeline the build will fail (``request-prefailed``) and nudge it."""
        if self.queue.prefail(self.claimed):
            log.info("build request %s: pre-failed (failure-output matched)", self.claimed.uuid)
            notify_safely(self.notify, self.claimed.request, "build")

    def pause(self, result_data: Mapping[str, Any]) -> None:
        # PAUSED with its event and the result data so far (for the dependents)
        self.queue.pause(self.claimed, result_data)
        notify_safely(self.notify, self.claimed.request, "build")
        self._progress("paused")
        log.info("build request %s: paused", self.claimed.uuid)
        resumed = self.queue.watch_flag(self.claimed.uuid, "resume")
        while not resumed.wait(self.poll_interval):
            if self.cancel_requested():
                return
        if not self.cancel_requested():
            self.queue.resume(self.claimed)
            log.info("build request %s: resumed", self.claimed.uuid)


def _retry_result(build_uuid: str, message: str) -> BuildResult:
    """A ``RETRY`` result for a build that could not start here (it may elsewhere)."""
    now = time.time()
    return BuildResult(build_uuid, Result.RETRY, message, started_at=now, ended_at=now)


def refused_result(build_uuid: str, message: str) -> BuildResult:
    """An ``ERROR`` result for a request that cannot run at all."""
    now = time.time()
    return BuildResult(build_uuid, Result.ERROR, message, started_at=now, ended_at=now)


def execute_request(
    queue: JobRequestQueue,
    request_uuid: str,
    worker: str,
    options: RunnerOptions,
    notify: Notify = no_notify,
    *,
    progress: Progress = no_progress,
    started_delay: float = STARTED_NUDGE_DELAY,
) -> ExecutionReport:
    """Claim, run and complete one build request; see the module docstring.

    ``notify`` is called after each event the request emits, so the
    pipeline that gets them is nudged: for the start only if the build
    still runs ``started_delay`` seconds after the claim (a shorter build's
    start is applied with its completion, :mod:`workers.notify`).
    """
    claimed = queue.claim(request_uuid, worker)
    if claimed is None:
        log.info("build request %s: nothing to claim (duplicate delivery or done)", request_uuid)
        return ExecutionReport(request_uuid, Delivery.DUPLICATE, worker=worker)
    with _bound(claimed):
        started = LaterNudge(notify, claimed.request, "build", started_delay)
        try:
            return _execute_claimed(
                queue, claimed, worker, options, (notify, progress), started=started
            )
        finally:
            started.cancel()


def _bound(claimed: ClaimedRequest) -> AbstractContextManager[None]:
    request = claimed.request
    return logcontext.bound_to_request(request, build=request.uuid, job=request.job_name)


def _record_hold(queue: JobRequestQueue, request: JobRequest, workspace: str) -> bool:
    """Count a held workspace against its autohold request (before the result lands).

    False when no request wants it after all: the scheduler's view of the
    autoholds may be a few seconds old (``AutoholdIndex``); this count is
    exact, and a workspace nobody wants is removed as usual.
    """
    store = AutoholdStore(queue.client)
    project, ref = str(request.info.get("project", "")), str(request.info.get("change", ""))
    try:
        held = store.record(
            request.tenant, project, request.job_name, ref, build=request.uuid, workspace=workspace
        )
    except (ZooKeeperUnavailableError, ConflictError) as exc:
        # the workspace stays; the request may hold one more build than asked
        log.warning("build request %s: autohold not recorded: %s", request.uuid, exc)
        return True
    if held is None:
        log.info("build request %s: no autohold wants it any more", request.uuid)
        return False
    log.info(
        "build request %s: workspace %s held for autohold %s", request.uuid, workspace, held.id
    )
    return True


def _execute_claimed(
    queue: JobRequestQueue,
    claimed: ClaimedRequest,
    worker: str,
    options: RunnerOptions,
    hooks: tuple[Notify, Progress],
    *,
    started: LaterNudge,
) -> ExecutionReport:
    request_uuid = claimed.uuid
    notify = hooks[0]
    about = request_label(claimed.request)
    log.info("build request %s: claimed by %s (%s)", request_uuid, worker, about)
    try:
        result = _run_claimed(queue, claimed, options, hooks)
        held = result.held_workspace
        if held and not _record_hold(queue, claimed.request, held):
            remove_workspace(
                BuildLayout.for_build(options.state_dir, claimed.uuid, options.build_dir)
            )
            result = replace(result, held_workspace=None)
        started.cancel()  # the completion's nudge brings the start with it
        outcome = _complete(queue, claimed, result)
        if outcome is Delivery.COMPLETED:
            notify_safely(notify, claimed.request, "build")
    except BaseException:
        # Never leave a RUNNING request locked by a live session: released,
        # it is found lost and recorded by the sweep.
        queue.release(claimed)
        raise
    if outcome is Delivery.LOCK_LOST:
        queue.release(claimed)
    log.info("build request %s: %s, %s", request_uuid, outcome.value, result.result.value)
    return ExecutionReport(request_uuid, outcome, result.result, worker, about)


def _run_claimed(
    queue: JobRequestQueue,
    claimed: ClaimedRequest,
    options: RunnerOptions,
    hooks: tuple[Notify, Progress],
) -> BuildResult:
    try:
        spec = BuildSpec.from_dict(queue.params(claimed.request))
    except (BuildSpecError, DecodeError, NoDataError) as exc:
        log.error("build request %s: unusable build spec: %s", claimed.uuid, exc)
        return refused_result(claimed.uuid, f"the build request holds no valid build spec: {exc}")
    try:
        plain = _decrypted(queue.client, spec, options)
    except SecretError as exc:
        log.error("build request %s: %s", claimed.uuid, exc)
        return refused_result(claimed.uuid, str(exc))
    try:
        nodes = _accept_nodes(queue.client, spec, claimed.request.uuid)
    except NodeStoreError as exc:
        log.warning("build request %s: %s", claimed.uuid, exc)
        now = time.time()
        return BuildResult(
            claimed.uuid, Result.NODE_FAILURE, f"NODE_FAILURE: {exc}", started_at=now, ended_at=now
        )
    try:
        spec = _with_providers(spec, nodes)
        if options.node_key is not None and _needs_node_key(spec):
            ensure_node_key(options.node_key)
        return _run_on_nodes(queue, claimed, options, hooks, spec=spec, plain=plain)
    except NodeKeyError as exc:
        log.error("build request %s: %s", claimed.uuid, exc)
        return _retry_result(claimed.uuid, str(exc))
    finally:
        _return_nodes(queue.client, nodes, claimed.uuid)


def _needs_node_key(spec: BuildSpec) -> bool:
    """A build with nodes or a playbook logs in with the node key (made on first use)."""
    every = (s for phase in PHASES for s in steps(spec, phase))
    return bool(spec.context.nodes) or any(is_playbook(s.path) for s in every)


def _with_providers(spec: BuildSpec, held: list[HeldNode]) -> BuildSpec:
    """The spec's nodes with their provider (``nodepool.provider`` of a playbook's hosts)."""
    providers = {h.node.id: h.node.provider for h in held}
    if not providers:
        return spec
    nodes = tuple(
        {"provider": providers.get(str(n["id"]), ""), **n} if "provider" not in n else n
        for n in spec.context.nodes
    )
    return replace(spec, context=replace(spec.context, nodes=nodes))


def _accept_nodes(client: ZooKeeperClient, spec: BuildSpec, build: str) -> list[HeldNode]:
    """Lock the build's nodes (held by this session for the build's life): ``in-use``."""
    request = spec.context.node_request
    if not request:
        return []
    held = NodeStore(client).accept(request, f"{worker_name()}/{build}")
    log.info("build %s: accepted nodes %s", build, ", ".join(h.node.id for h in held))
    return held


def _return_nodes(client: ZooKeeperClient, nodes: list[HeldNode], build: str) -> None:
    """Give the nodes back (``used``); one that cannot be is recovered by the sweep."""
    if not nodes:
        return
    try:
        NodeStore(client).return_nodes(nodes)
    except ZooKeeperError as exc:
        log.warning("build %s: returning its nodes: %s (the sweep recovers them)", build, exc)


def _run_on_nodes(
    queue: JobRequestQueue,
    claimed: ClaimedRequest,
    options: RunnerOptions,
    hooks: tuple[Notify, Progress],
    *,
    spec: BuildSpec,
    plain: dict[str, Any],
) -> BuildResult:
    missing = speculation.missing_sources(spec, everything=options.merge_here)
    cache = RepoCache(options.state_dir, options.connections) if missing else None
    if cache is not None:
        try:
            spec = speculation.rebuild(spec, missing, queue.client, cache)
        except WorkspaceError as exc:
            log.warning("build request %s: %s", claimed.uuid, exc)
            return _retry_result(claimed.uuid, f"workspace: {exc}")
    notify, progress = hooks
    control = RequestControl(
        queue, claimed, poll_interval=options.poll_interval, notify=notify, progress=progress
    )
    try:
        result = run_build(spec, control, options, plain)
    finally:
        control.close()
        if cache is not None:
            speculation.forget(spec, missing, cache)
    if control.stopped_for is not None and result.result is Result.ABORTED:
        # Stopped because this worker lost its claim, not cancelled by the
        # scheduler: the build is worth another attempt (RETRY counts against
        # the job's attempts), never a failure of the change.
        result = replace(
            result,
            result=Result.RETRY,
            message=f"the executor lost its claim: {control.stopped_for}",
        )
    return result


_keystores: weakref.WeakKeyDictionary[ZooKeeperClient, KeyStore] = weakref.WeakKeyDictionary()


def _decrypted(client: ZooKeeperClient, spec: BuildSpec, options: RunnerOptions) -> dict[str, Any]:
    """The spec's secrets decrypted; the project keys are loaded once per process."""
    if not spec.job.secrets:
        return {}
    password = options.keystore_password
    if not password:
        raise SecretError(
            "this executor has no keystore password (keystore.password in sluice.yaml): "
            "it cannot decrypt the job's secrets"
        )
    keystore = _keystores.get(client)
    if keystore is None:
        keystore = _keystores[client] = KeyStore(client, password)
    return decrypt_secrets(spec, keystore.private_key)


def _complete(queue: JobRequestQueue, claimed: ClaimedRequest, result: BuildResult) -> Delivery:
    return claims.complete(queue, claimed, result.to_dict(), "build")


def execute(
    settings: Settings,
    client: ZooKeeperClient,
    request_uuid: str,
    zone: str | None,
    worker: str,
    *,
    notify: Notify = no_notify,
    progress: Progress = no_progress,
) -> ExecutionReport:
    """:func:`execute_request` on the queue of ``zone`` with this worker's runner options."""
    options = runner_options(settings)
    queue = open_queue(client, zone)
    return execute_request(queue, request_uuid, worker, options, notify, progress=progress)
