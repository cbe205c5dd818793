"""Tenant layouts shared through ZooKeeper: the recorded states, per-process cache, the seam.

* :class:`LayoutState` — what a reconfiguration records for a tenant
  (``layout/<tenant>``); the reconfiguration itself (fetch every project
  branch's config files, write the config cache, build the layout, record
  the state, under the tenant WRITE lock) is :mod:`scheduler.reconfiguration`.
* :class:`TenantLayouts` — a process's built layouts, validated against the
  layout state before each use and rebuilt from ZooKeeper alone (under the
  READ lock) when stale; also the event routing of the forwarding hops
  (``tenants_for_project``, ``pipelines_for_event``).
* :class:`LayoutManagerSource` — the processing seam: the pipeline's manager
  with a :class:`LayoutFreezer` (speculative layouts for items that change
  config) and a semaphore ledger.

See docs/config.md ("The config cache, layout states and reconfiguration").
"""

from __future__ import annotations

from scheduler.layouts.cache import TenantLayouts, build_from_state
from scheduler.layouts.errors import (
    LayoutError,
    LayoutMismatchError,
    LockTimeoutError,
    NoLayoutError,
    TenantNotFoundError,
    UnknownPipelineError,
    UnsupportedManagerError,
)
from scheduler.layouts.source import (
    LayoutFreezer,
    LayoutManagerSource,
    job_info,
)
from scheduler.layouts.state import (
    KeptInfo,
    LayoutState,
    TenantLayout,
    tenant_from_dict,
    tenant_to_dict,
)
from scheduler.layouts.triggers import filter_matches, pipelines_for_event

__all__ = [
    "KeptInfo",
    "LayoutError",
    "LayoutFreezer",
    "LayoutManagerSource",
    "LayoutMismatchError",
    "LayoutState",
    "LockTimeoutError",
    "NoLayoutError",
    "TenantLayout",
    "TenantLayouts",
    "TenantNotFoundError",
    "UnknownPipelineError",
    "UnsupportedManagerError",
    "build_from_state",
    "filter_matches",
    "job_info",
    "pipelines_for_event",
    "tenant_from_dict",
    "tenant_to_dict",
]
