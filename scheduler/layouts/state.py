"""The tenant layout state as the layout layer sees it, and the tenant's own definition.

A layout state (``layout/<tenant>``, written by :mod:`scheduler.reconfiguration`)
holds everything a process needs to rebuild the tenant's layout from
ZooKeeper alone: the tenant's definition from ``main.yaml`` (so no process
depends on its local copy of the file), the exact files of every branch
(``sources``, kept by :mod:`scheduler.stores.config_cache`), the layout's
content hash to check the rebuild against, its uuid and ltime, and the
errors of the configuration it was built from.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from scheduler.config import Layout, LayoutResult, Tenant, TenantProject, UnparsedBranch
from scheduler.stores.config_cache import LayoutStateRecord, SourceRef

# 1: initial (2026-11).
STATE_SCHEMA = 1


def tenant_to_dict(tenant: Tenant) -> dict[str, Any]:
    """The tenant's definition as plain JSON (tuples become lists)."""
    data = dataclasses.asdict(tenant)
    data["projects"] = [dataclasses.asdict(p) for p in tenant.projects]
    data["drivers"] = dict(sorted(tenant.drivers.items()))
    return data


def _fix(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


def tenant_from_dict(data: Mapping[str, Any]) -> Tenant:
    """The inverse of :func:`tenant_to_dict`; unknown keys are ignored."""
    project_fields = {f.name for f in dataclasses.fields(TenantProject)}
    projects = tuple(
        TenantProject(**{k: _fix(v) for k, v in p.items() if k in project_fields})
        for p in data.get("projects", ())
    )
    tenant_fields = {f.name for f in dataclasses.fields(Tenant)} - {"projects", "drivers"}
    rest = {k: _fix(v) for k, v in data.items() if k in tenant_fields}
    return Tenant(projects=projects, drivers=dict(data.get("drivers", {})), **rest)


@dataclass(frozen=True)
class KeptInfo:
    """A branch that kept its last good configuration, and the errors of its update."""

    project: str
    branch: str
    errors: tuple[str, ...]


@dataclass(frozen=True)
class LayoutState:
    """A tenant's layout state as read from ZooKeeper."""

    tenant: Tenant
    uuid: str
    layout_hash: str
    ltime: int
    # ConfigError.describe() of every error of the layout's configuration
    errors: tuple[str, ...]
    kept: tuple[KeptInfo, ...]
    sources: tuple[SourceRef, ...]
    # of the state node: a changed mzxid means another reconfiguration
    version: int
    mzxid: int
    # the layout's pipeline names (None: a state written before they were recorded)
    pipelines: tuple[str, ...] | None = None

    @property
    def name(self) -> str:
        return self.tenant.name

    @classmethod
    def from_record(cls, record: LayoutStateRecord) -> LayoutState:
        data = record.data
        return cls(
            tenant=tenant_from_dict(data["tenant"]),
            uuid=str(data["uuid"]),
            layout_hash=str(data["layout-hash"]),
            ltime=int(data.get("ltime", 0)),
            errors=tuple(str(e) for e in data.get("errors", ())),
            kept=tuple(
                KeptInfo(str(k["project"]), str(k["branch"]), tuple(k.get("errors", ())))
                for k in data.get("kept", ())
            ),
            sources=record.sources,
            version=record.version,
            mzxid=record.mzxid,
            pipelines=(tuple(str(p) for p in data["pipelines"]) if "pipelines" in data else None),
        )


def state_data(
    tenant: Tenant,
    *,
    uuid: str,
    layout_hash: str,
    ltime: int,
    errors: tuple[str, ...],
    kept: tuple[KeptInfo, ...],
    pipelines: tuple[str, ...] = (),
) -> dict[str, Any]:
    """The fields the layout layer stores (the cache adds ``sources``).

    ``pipelines`` lets a reader (``sluice enqueue``) check a pipeline name
    without building the layout.
    """
    return {
        "state-schema": STATE_SCHEMA,
        "tenant": tenant_to_dict(tenant),
        "uuid": uuid,
        "layout-hash": layout_hash,
        "ltime": ltime,
        "errors": list(errors),
        "kept": [
            {"project": k.project, "branch": k.branch, "errors": list(k.errors)} for k in kept
        ],
        "pipelines": sorted(pipelines),
    }


@dataclass(frozen=True)
class TenantLayout:
    """A built layout with the state and files it came from."""

    state: LayoutState
    result: LayoutResult
    # every branch the layout was built from (kept branches: their last good files)
    branches: tuple[UnparsedBranch, ...]

    @property
    def tenant(self) -> Tenant:
        return self.state.tenant

    @property
    def layout(self) -> Layout:
        return self.result.layout

    def branch_files(self, project: str, branch: str) -> Mapping[str, str] | None:
        for unparsed in self.branches:
            if (unparsed.project, unparsed.branch) == (project, branch):
                return unparsed.files
        return None
