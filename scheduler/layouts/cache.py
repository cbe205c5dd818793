"""Per-process cache of tenant layouts, validated against ZooKeeper before each use.

:meth:`TenantLayouts.get` answers with the tenant's current layout:

* a cached layout is used only if the tenant's layout state still has the
  ``mzxid`` (ltime) it was built from: one ``exists`` call per use
  (docs/architecture.md invariant 1);
* otherwise the layout is rebuilt from ZooKeeper alone, under the tenant
  READ lock so no reconfiguration changes the state meanwhile: the state
  names the tenant's definition and the exact files of every branch, the
  files come from the config cache, and the result must have the content
  hash the state records (:class:`LayoutMismatchError` otherwise, e.g. two
  Sluice versions that parse differently).

No merger is involved. The same state gives every process a byte-identical
``Layout.to_json()``.

Routing for the event hops (:class:`scheduler.processing.forwarding.Routing`)
lives here too: :meth:`TenantLayouts.tenants_for_project` reads only the
layout states (tenant definitions), :meth:`TenantLayouts.pipelines_for_event`
the layout.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Any

from scheduler import scope
from scheduler.config import UnparsedBranch, build_layout
from scheduler.layouts.errors import LayoutMismatchError, LockTimeoutError, NoLayoutError
from scheduler.layouts.state import LayoutState, TenantLayout
from scheduler.layouts.triggers import (
    could_match,
    default_branch,
    pipelines_for_event,
    requirements_verdict,
    verdicts,
)
from scheduler.stores import config_cache as cc
from scheduler.wire.events import TriggerEvent
from scheduler.zk import locks, paths
from scheduler.zk.client import ZooKeeperClient

log = logging.getLogger(__name__)

REBUILD_ATTEMPTS = 3


def build_from_state(client: ZooKeeperClient, state: LayoutState) -> TenantLayout:
    """Rebuild the layout a state describes from the config cache (no lock taken)."""
    branches = tuple(
        UnparsedBranch(s.project, s.branch, cc.read_files(client, s)) for s in state.sources
    )
    result = build_layout(state.tenant, branches)
    built = result.layout.content_hash()
    if built != state.layout_hash:
        raise LayoutMismatchError(
            f"tenant {state.name!r}: rebuilt layout {built[:12]} but the state "
            f"{state.uuid} records {state.layout_hash[:12]}"
        )
    return TenantLayout(state, result, branches)


class TenantLayouts:
    """Built layouts by tenant, for one process (thread-safe)."""

    def __init__(self, client: ZooKeeperClient, *, lock_timeout: float | None = None) -> None:
        self.client = client
        self.lock_timeout = lock_timeout
        self.rebuilds = 0  # how many layouts this process built (for tests and metrics)
        self._layouts: dict[str, TenantLayout] = {}
        self._states: dict[str, LayoutState] = {}
        # every tenant's state, valid while the layout epoch is unchanged
        self._all: tuple[int, tuple[LayoutState, ...]] | None = None
        self._lock = threading.Lock()

    # -- layouts ---------------------------------------------------------------

    def get(self, tenant: str) -> TenantLayout:
        """The tenant's current layout; :class:`NoLayoutError` if never reconfigured.

        Validated once per :func:`scheduler.scope.validation_scope` (a pass).
        """
        return scope.once((id(self), tenant), lambda: self._validated(tenant))

    def _mzxid(self, tenant: str) -> int | None:
        """The layout state's mzxid: one ``exists``, or seeded by the pass that read it."""
        key = scope.layout_mzxid_key(tenant)
        return scope.once(key, lambda: cc.layout_state_mzxid(self.client, tenant))

    def _validated(self, tenant: str) -> TenantLayout:
        mzxid = self._mzxid(tenant)
        if mzxid is None:
            raise NoLayoutError(f"tenant {tenant!r} has no layout yet (not reconfigured)")
        with self._lock:
            cached = self._layouts.get(tenant)
        if cached is not None and cached.state.mzxid == mzxid:
            return cached
        built = self._rebuild(tenant)
        with self._lock:
            self._layouts[tenant] = built
            self._states[tenant] = built.state
        return built

    def _rebuild(self, tenant: str) -> TenantLayout:
        held = locks.acquire(
            self.client,
            paths.tenant_lock(tenant),
            kind=locks.LockKind.READ,
            identifier="layout-reader",
            timeout=self.lock_timeout,
        )
        if held is None:
            raise LockTimeoutError(f"tenant {tenant!r}: read lock not obtained in time")
        with held:
            record = cc.load_layout_state(self.client, tenant)
            if record is None:
                raise NoLayoutError(f"tenant {tenant!r} has no layout yet (not reconfigured)")
            state = LayoutState.from_record(record)
            built = build_from_state(self.client, state)
        self.rebuilds += 1
        log.info("tenant %s: built layout %s from the config cache", tenant, state.uuid)
        return built

    def invalidate(self, tenant: str | None = None) -> None:
        with self._lock:
            self._all = None
            if tenant is None:
                self._layouts.clear()
                self._states.clear()
            else:
                self._layouts.pop(tenant, None)
                self._states.pop(tenant, None)

    # -- states only (cheap: no build) -------------------------------------

    def state(self, tenant: str) -> LayoutState | None:
        """The tenant's layout state (validated by mzxid), without building the layout."""
        mzxid = self._mzxid(tenant)
        if mzxid is None:
            return None
        with self._lock:
            cached = self._states.get(tenant)
        if cached is not None and cached.mzxid == mzxid:
            return cached
        record = cc.load_layout_state(self.client, tenant)
        if record is None:
            return None
        state = LayoutState.from_record(record)
        with self._lock:
            self._states[tenant] = state
        return state

    def tenants(self) -> list[str]:
        return cc.layout_tenants(self.client)

    # -- routing (scheduler.processing.forwarding.Routing) --------------------

    def all_states(self) -> tuple[LayoutState, ...]:
        """Every tenant's layout state; one call when none changed (the layout epoch)."""
        epoch = cc.layout_epoch(self.client)
        with self._lock:
            cached = self._all
        if cached is not None and cached[0] == epoch:
            return cached[1]
        states = tuple(s for t in self.tenants() if (s := self.state(t)) is not None)
        with self._lock:
            self._all = (epoch, states)
        return states

    def tenants_for_project(self, connection: str, project: str) -> list[str]:
        """Tenants whose definition holds ``project`` of ``connection``."""
        found: list[str] = []
        for state in self.all_states():
            held = state.tenant.project(project)
            if held is not None and held.connection == connection:
                found.append(state.name)
        return found

    def pipelines_for_event(self, tenant: str, event: Mapping[str, Any]) -> list[str]:
        """Pipelines of ``tenant`` whose triggers match ``event`` (see triggers.py)."""
        return pipelines_for_event(self.get(tenant), event)

    def could_trigger(self, connection: str, event: TriggerEvent) -> bool:
        """Whether a tenant holding its project has a trigger that could match ``event``.

        Asked before the forge is read (see triggers.py :func:`could_match`).
        """
        described = {**event.to_dict(), "connection": connection}
        try:
            return any(
                could_match(self.get(tenant), described)
                for tenant in self.tenants_for_project(connection, event.project)
            )
        except (NoLayoutError, LayoutMismatchError, LockTimeoutError):
            return True  # a layout not to be had now: read the event, the routing decides

    def verdicts(self, tenant: str, event: Mapping[str, Any]) -> dict[str, str]:
        """Pipelines of ``tenant`` whose triggers match ``event``, with verdicts (triggers.py)."""
        return verdicts(self.get(tenant), event)

    def requirements_verdict(self, tenant: str, pipeline: str, event: Mapping[str, Any]) -> str:
        """Whether ``event``'s change may enter ``pipeline``, triggers aside (triggers.py)."""
        return requirements_verdict(self.get(tenant), pipeline, event)

    def pipelines(self, tenant: str) -> list[str]:
        """The names of the tenant's pipelines."""
        return sorted(self.get(tenant).layout.pipelines)

    def default_branch(self, tenant: str, project: str) -> str:
        """The branch a tag of ``project`` is tested on (see triggers.py)."""
        return default_branch(self.get(tenant), project)
