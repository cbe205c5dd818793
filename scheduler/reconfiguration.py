"""Reconfiguring tenants: the one module of the reconfiguration, from a request to a layout state.

**A reconfiguration** (:func:`reconfigure_tenant`), under the tenant WRITE
lock (readers wait):

1. reads the tenant from ``main.yaml`` (``Settings.tenant_config``);
2. asks ``fetch`` for every project's branches and their config files
   (:func:`merger_fetch` submits merger jobs; a merger worker reads its
   own repo cache through :func:`fetch_with`; tests read real git
   repositories);
3. writes each branch to the ZooKeeper config cache (a branch whose files
   did not change costs one read) and marks branches that vanished;
4. builds the layout with last-good semantics
   (:func:`scheduler.config.last_good_layout`): a branch whose update broke
   its own configuration keeps the files of the previous layout;
5. records the layout state (uuid, content hash, ltime, the tenant's
   definition, the exact files of every branch used, the errors and the
   kept branches) in one fenced transaction, unless nothing changed;
6. prunes cached files no layout and no index names any more.

The tenant write lock's context fences every write: a reconfiguration
whose session was lost cannot record a state after its successor did. A
tenant that left the tenant file gets an empty layout
(:func:`retire_tenant`), and the pipelines a reconfiguration removed are
nudged to retire (:func:`retire_removed_pipelines`).

**Where the files come from.** :func:`merger_fetch` is the ``fetch`` of a
real system: per project one branch-heads job and one config job, run by
merger workers (the scheduler never clones a repository itself), each
submitted, nudged and waited for by :func:`merge_and_wait`.
:func:`fetch_with` makes the same fetch from any way of running a merger
job (``sluice.merger.reconfigure`` runs them in its own process).
:func:`reconfigure` does every tenant of ``main.yaml`` (or one): ``sluice
reconfigure``, the manual trigger.

**Reconfiguration as events.** Zuul reconfigures a tenant when a change
that edits configuration merges, and loads every tenant when it starts.
Sluice keeps those requests where it keeps all work, in ZooKeeper: one
event queue per tenant, ``/events/tenant/<tenant>/reconfigure``
(docs/architecture.md invariant 2: a lost nudge delays a request by one
sweep, never loses it).

* A pipeline pass that applies the successful push of an item whose change
  touched configuration puts a request in the same transaction that
  records the push (:func:`request_ops`), then nudges the merger task.
* The sweep compares the tenant file's digest with the one recorded at
  ``/config/tenant-file`` (:func:`check_tenant_file`); a new or changed file
  (a fresh deployment included) requests a reconfiguration of every tenant
  it names, and of those it no longer names (they retire). ``sluice stack
  up`` runs the same check at once.
* ``sluice.merger.reconfigure`` (``tasks/merger.py``) applies them on a
  merger worker, which reads the config from its own repo cache: the task
  gives :func:`apply_requests` a :func:`fetch_with` of the worker's local
  job runner (:mod:`workers.merger.reconfigure`). One reconfiguration under
  the tenant write lock for every request read, acknowledged only after it
  succeeded; a failure is recorded (:func:`reconfigure_error`) and leaves
  them for the next nudge or the sweep.

The layout-building policies it applies (last good files, speculative
layouts) are pure functions of the configuration package
(:mod:`scheduler.config.policies`); the layouts a process builds from the
recorded states are :mod:`scheduler.layouts`.
"""

from __future__ import annotations

import hashlib
import logging
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scheduler.config import (
    BranchKey,
    ConfigError,
    KeptBranch,
    Layout,
    Tenant,
    TenantProject,
    UnparsedBranch,
    last_good_layout,
    parse_tenant_config,
)
from scheduler.config.checkout import candidate_paths
from scheduler.errors import SluiceError
from scheduler.layouts.errors import LockTimeoutError, TenantNotFoundError
from scheduler.layouts.state import KeptInfo, LayoutState, state_data
from scheduler.nudge import dispatch, task_names
from scheduler.settings.sections import Settings
from scheduler.stores import config_cache as cc
from scheduler.stores import inventory
from scheduler.stores.merge_requests import submit_merge_job, wait_for_merge_result
from scheduler.wire import merger as wire
from scheduler.wire.events import MalformedEventError, ReconfigureEvent, decode_as
from scheduler.zk import flags, locks, paths, stored
from scheduler.zk.client import ZooKeeperClient
from scheduler.zk.context import LockContext, OpFailedError, Transaction
from scheduler.zk.errors import NoDataError
from scheduler.zk.event_queue import EventQueue
from scheduler.zk.ltime import ltime

log = logging.getLogger(__name__)

# ---------------------------------------------------------------- one tenant

# fetch(connection, project) -> {branch: {path: text}} (a FetchedBranches when
# the fetcher knows the repository's default branch)
Fetch = Callable[[str, str], Mapping[str, Mapping[str, str]]]
# Tried in this order when the fetcher does not know the default branch.
CONVENTIONAL_DEFAULTS = ("main", "master")


class FetchedBranches(dict[str, dict[str, str]]):
    """A project's branches and their config files, with its default branch."""

    def __init__(self, branches: Mapping[str, dict[str, str]], default_branch: str = "") -> None:
        super().__init__(branches)
        self.default_branch = default_branch


def branches_to_read(
    project: TenantProject, branches: Mapping[str, Mapping[str, str]]
) -> Mapping[str, Mapping[str, str]]:
    """The branches whose configuration is read: a config project's one branch.

    Zuul reads a config project from its ``load-branch``, else its default
    branch; every other branch (in the git driver, each proposed change) is
    ignored, so proposing a change to the config project never disturbs the
    tenant. Untrusted projects keep every branch.
    """
    if not project.trusted or len(branches) <= 1:
        return branches
    wanted = project.load_branch
    if wanted is None:
        default = branches.default_branch if isinstance(branches, FetchedBranches) else ""
        candidates = (default, *CONVENTIONAL_DEFAULTS) if default else CONVENTIONAL_DEFAULTS
        wanted = next((name for name in candidates if name in branches), None)
    if wanted is None or wanted not in branches:
        return branches  # the loader names the problem (set load-branch)
    return {wanted: branches[wanted]}


@dataclass(frozen=True)
class ReconfigureResult:
    """What a reconfiguration did: the recorded state and the layout it describes."""

    state: LayoutState
    layout: Layout
    # the errors of the configuration the layout was built from
    errors: tuple[ConfigError, ...]
    # branches whose update was rejected (they kept their last good files), and why
    kept: tuple[KeptBranch, ...]
    # False when the layout and its files were the same as before (nothing written)
    changed: bool

    @property
    def messages(self) -> list[str]:
        """Every error as users read them (``project@branch: file:line: ...``), kept last."""
        rejected = [e.describe() for k in self.kept for e in k.errors]
        return [e.describe() for e in self.errors] + rejected


def load_tenant(settings: Settings, tenant_name: str) -> Tenant:
    """The tenant's definition from ``main.yaml``; :class:`TenantNotFoundError` if absent."""
    path = Path(settings.tenant_config)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise TenantNotFoundError(f"{path}: cannot read the tenant config: {exc}") from None
    config = parse_tenant_config(text, path.name, settings.connections)
    tenant = config.tenant(tenant_name)
    if tenant is None:
        why = "; ".join(str(e) for e in config.errors) or "not defined"
        raise TenantNotFoundError(f"tenant {tenant_name!r} is not available: {why}")
    return tenant


def reconfigure_tenant(
    client: ZooKeeperClient,
    settings: Settings,
    tenant_name: str,
    fetch: Fetch,
    *,
    lock_timeout: float | None = None,
) -> ReconfigureResult:
    """Reconfigure ``tenant_name`` under its write lock; see the module docstring."""
    return _under_write_lock(client, load_tenant(settings, tenant_name), fetch, lock_timeout)


def retire_tenant(
    client: ZooKeeperClient, tenant_name: str, *, lock_timeout: float | None = None
) -> ReconfigureResult:
    """Give a tenant that left the tenant file an empty layout (no project, no pipeline).

    Its pipelines are then removed ones: their passes dequeue and report
    their items (``retire_removed_pipelines``). The empty layout state stays.
    """
    return _under_write_lock(client, Tenant(tenant_name, projects=()), _no_fetch, lock_timeout)


def _no_fetch(connection: str, project: str) -> Mapping[str, Mapping[str, str]]:
    raise AssertionError(f"a tenant without projects fetched {connection}/{project}")


def _under_write_lock(
    client: ZooKeeperClient, tenant: Tenant, fetch: Fetch, lock_timeout: float | None
) -> ReconfigureResult:
    held = locks.acquire(
        client,
        paths.tenant_lock(tenant.name),
        kind=locks.LockKind.WRITE,
        identifier="reconfigure",
        timeout=lock_timeout,
    )
    if held is None:
        raise LockTimeoutError(f"tenant {tenant.name!r}: write lock not obtained in time")
    with held:
        return _reconfigure(held.context, tenant, fetch)


def _reconfigure(context: LockContext, tenant: Tenant, fetch: Fetch) -> ReconfigureResult:
    client = context.client
    previous = cc.load_layout_state(client, tenant.name)
    last_good = _last_good(client, tenant, previous)
    fetched = _fetch_into_cache(context, tenant, fetch)
    unparsed = [UnparsedBranch(b.project, b.branch, b.files) for b in fetched]
    outcome = last_good_layout(tenant, unparsed, {k: v[1] for k, v in last_good.items()})
    kept_keys = {k.key for k in outcome.kept}
    used = [last_good[b.key][0] if b.key in kept_keys else b for b in fetched]
    result = outcome.result
    errors = tuple(result.errors)
    kept = tuple(
        KeptInfo(k.project, k.branch, tuple(e.describe() for e in k.errors)) for k in outcome.kept
    )
    for info in kept:
        log.warning(
            "tenant %s: %s@%s keeps its last good configuration: %s",
            tenant.name,
            info.project,
            info.branch,
            "; ".join(info.errors),
        )
    layout_hash = result.layout.content_hash()
    if previous is not None and _unchanged(previous, tenant, layout_hash, used, kept):
        state = LayoutState.from_record(previous)
        return ReconfigureResult(state, result.layout, errors, outcome.kept, changed=False)
    all_errors = tuple(e.describe() for e in errors)
    data = state_data(
        tenant,
        uuid=uuid.uuid4().hex,
        layout_hash=layout_hash,
        ltime=ltime(client),
        errors=all_errors,
        kept=kept,
        pipelines=tuple(result.layout.pipelines),
    )
    record = cc.save_layout_state(context, tenant.name, data, used)
    cc.prune_branches(context, [b.key for b in fetched])
    state = LayoutState.from_record(record)
    log.info("tenant %s: layout %s (%s)", tenant.name, state.uuid, layout_hash[:12])
    return ReconfigureResult(state, result.layout, errors, outcome.kept, changed=True)


def _last_good(
    client: ZooKeeperClient, tenant: Tenant, previous: cc.LayoutStateRecord | None
) -> dict[BranchKey, tuple[cc.BranchFiles, UnparsedBranch]]:
    """The branches of the previous layout, as files, for the last-good policy."""
    if previous is None:
        return {}
    result: dict[BranchKey, tuple[cc.BranchFiles, UnparsedBranch]] = {}
    for source in previous.sources:
        project = tenant.project(source.project)
        if project is None or project.connection != source.connection:
            continue
        try:
            files = cc.read_files(client, source)
        except cc.CacheMissError:
            log.warning(
                "tenant %s: last good files of %s@%s are gone",
                tenant.name,
                source.project,
                source.branch,
            )
            continue
        branch = cc.BranchFiles(source.connection, source.project, source.branch, files)
        result[source.key] = (
            branch,
            UnparsedBranch(source.project, source.branch, files),
        )
    return result


def _fetch_into_cache(context: LockContext, tenant: Tenant, fetch: Fetch) -> list[cc.BranchFiles]:
    """Every branch of every project, fetched and written to the cache."""
    fetched: list[cc.BranchFiles] = []
    for project in tenant.projects:
        branches = branches_to_read(project, fetch(project.connection, project.name))
        for name in sorted(branches):
            branch = cc.BranchFiles(project.connection, project.name, name, dict(branches[name]))
            cc.write_branch(context, branch)
            fetched.append(branch)
        for gone in set(cc.cached_branches(context.client, project.connection, project.name)):
            if gone not in branches:
                cc.remove_branch(context, project.connection, project.name, gone)
    return fetched


def _unchanged(
    previous: cc.LayoutStateRecord,
    tenant: Tenant,
    layout_hash: str,
    used: Sequence[cc.BranchFiles],
    kept: tuple[KeptInfo, ...],
) -> bool:
    """Same tenant, same files, same layout, same kept branches: nothing to record."""
    old = LayoutState.from_record(previous)
    sources = tuple(cc.SourceRef.of(b) for b in used)
    same = (old.layout_hash, old.sources, old.tenant, old.kept) == (
        layout_hash,
        sources,
        tenant,
        kept,
    )
    return bool(same)


# ---------------------------------------------------------------- the fetch


class ReconfigurationError(SluiceError):
    """The configuration could not be read (no merger answered, a merge job failed)."""


# runs one merger job and returns its result (through the queue, or in-process)
RunJob = Callable[[wire.MergerJob], "wire.MergerResult | None"]


def merger_fetch(client: ZooKeeperClient, settings: Settings, timeout: float = 120.0) -> Fetch:
    """Read config files at every branch head of a project through merger jobs."""

    def run(job: wire.MergerJob) -> wire.MergerResult | None:
        return merge_and_wait(client, job, timeout, settings=settings)

    return fetch_with(run, f"no merger answered within {timeout:.0f}s; is a merger worker running?")


def merge_and_wait(
    client: ZooKeeperClient,
    job: wire.MergerJob,
    timeout: float,
    *,
    settings: Settings | None = None,
    tenant: str = "",
) -> wire.MergerResult | None:
    """Submit ``job``, nudge a merger, wait for the result and remove the request.

    None if no merger answered within ``timeout`` (the request stays; a
    merger that takes it later completes it for nobody, and the cleanup
    removes it).
    """
    kind = wire.job_kind(job)
    request = submit_merge_job(client, kind, job, tenant=tenant, wait=True)
    dispatch.send_merge(request.uuid, settings=settings)
    return wait_for_merge_result(client, request.uuid, timeout, kind=kind, remove=True)


def fetch_with(run_job: RunJob, unanswered: str = "the merger job was not answered") -> Fetch:
    """A fetch that runs a branch-heads job, then a config job, with ``run_job``."""

    def run(job: wire.MergerJob) -> wire.MergerResult:
        result = run_job(job)
        if result is None:
            raise ReconfigurationError(unanswered)
        if result.failure is not None:
            failure = result.failure
            raise ReconfigurationError(f"{failure.project} {failure.ref}: {failure.message}")
        return result

    def fetch(connection: str, project: str) -> dict[str, dict[str, str]]:
        heads = run(wire.BranchHeadsJob(uuid.uuid4().hex, connection, project))
        assert isinstance(heads, wire.BranchHeadsResult)
        branches = tuple(sorted(heads.state.branches)) if heads.state else ()
        if not branches:
            return {}
        config = run(wire.ConfigJob(uuid.uuid4().hex, connection, project, branches))
        assert isinstance(config, wire.ConfigResult)
        found: dict[str, dict[str, str]] = {branch: {} for branch in branches}
        found.update({c.branch: dict(c.files) for c in config.config})
        return FetchedBranches(found, heads.default_branch)

    return fetch


# ---------------------------------------------------------------- by hand


def tenant_names(settings: Settings) -> list[str]:
    path = Path(settings.tenant_config)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ReconfigurationError(f"{path}: cannot read the tenant config: {exc}") from None
    config = parse_tenant_config(text, path.name, settings.connections)
    for error in config.errors:
        log.error("%s", error)
    return [tenant.name for tenant in config.tenants]


def reconfigure(
    client: ZooKeeperClient, settings: Settings, fetch: Fetch, tenant: str | None = None
) -> dict[str, ReconfigureResult]:
    """Reconfigure one tenant or all of ``main.yaml``; results by tenant name."""
    names = [tenant] if tenant else tenant_names(settings)
    results = {}
    for name in names:
        results[name] = result = reconfigure_tenant(client, settings, name, fetch)
        retire_removed_pipelines(client, settings, name, result.layout)
    return results


def retire_removed_pipelines(
    client: ZooKeeperClient, settings: Settings, tenant: str, layout: Layout
) -> list[str]:
    """Nudge the pipelines a reconfiguration removed: their items are dequeued and reported.

    Their dirty flag is raised first, so the sweep nudges them if this
    nudge is lost (the pass itself is the retiring manager's).
    """
    removed = [p for p in inventory.pipelines(client, tenant) if p not in layout.pipelines]
    for pipeline in removed:
        flags.raise_flag(client, paths.pipeline_dirty(tenant, pipeline))
        dispatch.send(task_names.PROCESS_PIPELINE, tenant, pipeline, settings=settings)
    if removed:
        log.info("tenant %s: pipelines removed: %s", tenant, ", ".join(removed))
    return removed


# ---------------------------------------------------------------- requests

# nudge(task name, arguments)
Nudge = Callable[[str, tuple[str, ...]], None]
# Seconds a reconfiguration task waits for the tenant's write lock before it
# gives way (LockTimeoutError: the task is retried later, the requests stay).
LOCK_WAIT = 2.0


def touches_config(files: Iterable[str], extra: Iterable[str] = ()) -> bool:
    """Whether a change with these files edits Zuul or Sluice configuration."""
    return bool(candidate_paths(files, extra))


def request_ops(client: ZooKeeperClient, tenant: str, why: str, txn: Transaction) -> None:
    """Add a reconfiguration request for ``tenant`` to ``txn``."""
    queue = EventQueue(client, paths.tenant_reconfigure_queue(tenant))
    queue.ensure()
    queue.put_ops(ReconfigureEvent(why, time.time()).to_dict(), txn)


def apply_requests(client: ZooKeeperClient, settings: Settings, tenant: str, fetch: Fetch) -> bool:
    """Reconfigure ``tenant`` with ``fetch`` if it has requests; True if it did."""
    queue = EventQueue(client, paths.tenant_reconfigure_queue(tenant))
    events = queue.read()
    if not events:
        return False
    why = sorted({_why(e.payload) for e in events})
    log.info("tenant %s: reconfiguring (%s)", tenant, "; ".join(why))
    try:
        _reconfigure_or_retire(client, settings, tenant, fetch)
    except ReconfigurationError as exc:
        # The requests stay (the sweep asks again); say why for `stack up` and operators.
        stored.save(
            LockContext(client), paths.tenant_reconfigure_error(tenant), {"error": str(exc)}
        )
        raise
    flags.lower_flag(client, paths.tenant_reconfigure_error(tenant))
    for event in events:
        queue.ack(event)
    return True


def _why(payload: Mapping[str, Any]) -> str:
    try:
        return decode_as(payload, ReconfigureEvent).why
    except MalformedEventError as exc:  # still a request to reconfigure: do it
        return f"(malformed request: {exc})"


def reconfigure_error(client: ZooKeeperClient, tenant: str) -> str | None:
    """Why the tenant's last requested reconfiguration failed, None if it did not."""
    try:
        found = stored.load(LockContext(client), paths.tenant_reconfigure_error(tenant))
    except NoDataError:
        return None
    return str(found.data.get("error", ""))


def _reconfigure_or_retire(
    client: ZooKeeperClient, settings: Settings, tenant: str, fetch: Fetch
) -> None:
    try:
        # Never wait long for the write lock: a `sluice reconfigure` holding it
        # may be waiting for this very merger worker's jobs. The task retries.
        result = reconfigure_tenant(client, settings, tenant, fetch, lock_timeout=LOCK_WAIT)
        for message in result.messages:
            log.warning("tenant %s: %s", tenant, message)
        retire_removed_pipelines(client, settings, tenant, result.layout)
    except TenantNotFoundError as exc:
        log.warning("tenant %s: not reconfigured: %s", tenant, exc)
        if left_tenant_file(settings, tenant) and cc.load_layout_state(client, tenant):
            # Removed from a valid tenant file: every pipeline retires.
            result = retire_tenant(client, tenant, lock_timeout=LOCK_WAIT)
            retire_removed_pipelines(client, settings, tenant, result.layout)


def left_tenant_file(settings: Settings, tenant: str) -> bool:
    """Whether the tenant file is readable, valid, and does not name ``tenant``.

    A file that cannot be read or has errors retires nothing (the tenant
    keeps its layout until the file is mended).
    """
    try:
        text = Path(settings.tenant_config).read_text(encoding="utf-8")
    except OSError:
        return False
    config = parse_tenant_config(text, Path(settings.tenant_config).name, settings.connections)
    return not config.errors and config.tenant(tenant) is None


def file_digest(path: Path) -> str:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError as exc:
        raise ReconfigurationError(f"{path}: cannot read the tenant config: {exc}") from None


def check_tenant_file(client: ZooKeeperClient, settings: Settings, nudge: Nudge) -> list[str]:
    """Request a reconfiguration of every tenant if the tenant file changed.

    Returns the tenants asked. The digest and the requests commit in one
    transaction that compares-and-sets the digest node, so two sweeps (or a
    sweep and ``stack up``) never both ask.
    """
    path = Path(settings.tenant_config)
    digest = file_digest(path)
    node = paths.tenant_file_state()
    context = LockContext(client)
    try:
        found = stored.load(context, node)
        recorded, version = found.data.get("sha256"), found.version
    except NoDataError:
        recorded, version = None, -1
    if recorded == digest:
        return []
    named = tenant_names(settings)
    # a tenant with a layout that the file no longer names is asked too (retired)
    tenants = named + [t for t in cc.layout_tenants(client) if t not in named]
    why = "the tenant file is new" if recorded is None else "the tenant file changed"
    requests = Transaction(client)
    for tenant in tenants:
        request_ops(client, tenant, why, requests)
    record = {"sha256": digest, "path": str(path), "time": time.time()}
    try:
        stored.save(context, node, record, version=version, extra=requests)
    except OpFailedError:
        return []  # another process recorded this file first (and asked)
    for tenant in tenants:
        nudge(task_names.RECONFIGURE, (tenant,))
    log.info("%s: %s; reconfiguration requested for %s", path, why, ", ".join(tenants))
    return tenants
