"""Reconfiguring a tenant: fetch its files, fill the cache, build and record the layout.

:func:`reconfigure_tenant` is what the ``process tenant`` task calls for a
reconfiguration (a branch update of a project holding config, an operator's
request). Under the tenant WRITE lock (readers wait) it

1. reads the tenant from ``main.yaml`` (``Settings.tenant_config``);
2. asks ``fetch`` for every project's branches and their config files
   (the scheduler's fetch submits merger config jobs; tests read real git
   repositories);
3. writes each branch to the ZooKeeper config cache (a branch whose files
   did not change costs one read) and marks branches that vanished;
4. builds the layout with last-good semantics
   (:func:`scheduler.config.reconfigure`): a branch whose update broke its
   own configuration keeps the files of the previous layout;
5. records the layout state (uuid, content hash, ltime, the tenant's
   definition, the exact files of every branch used, the errors and the
   kept branches) in one fenced transaction, unless nothing changed;
6. prunes cached files no layout and no index names any more.

The tenant write lock's context fences every write: a reconfiguration
whose session was lost cannot record a state after its successor did.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from scheduler.config import (
    ConfigError,
    KeptBranch,
    Layout,
    Tenant,
    TenantProject,
    UnparsedBranch,
    parse_tenant_config,
    reconfigure,
)
from scheduler.config.reconfigure import BranchKey
from scheduler.layouts.errors import LockTimeoutError, TenantNotFoundError
from scheduler.layouts.state import KeptInfo, LayoutState, state_data
from scheduler.settings.sections import Settings
from scheduler.stores import config_cache as cc
from scheduler.zk import locks, paths
from scheduler.zk.client import ZooKeeperClient
from scheduler.zk.context import LockContext
from scheduler.zk.ltime import ltime

log = logging.getLogger(__name__)

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
    outcome = reconfigure(tenant, unparsed, {k: v[1] for k, v in last_good.items()})
    kept_keys = {(k.project, k.branch) for k in outcome.kept}
    used = [last_good[_key(b)][0] if _key(b) in kept_keys else b for b in fetched]
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
    cc.prune_branches(context, [(b.connection, b.project, b.branch) for b in fetched])
    state = LayoutState.from_record(record)
    log.info("tenant %s: layout %s (%s)", tenant.name, state.uuid, layout_hash[:12])
    return ReconfigureResult(state, result.layout, errors, outcome.kept, changed=True)


def _key(branch: cc.BranchFiles) -> BranchKey:
    return (branch.project, branch.branch)


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
        result[(source.project, source.branch)] = (
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
