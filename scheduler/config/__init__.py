"""Configuration: tenants, Zuul-syntax project config, layouts, frozen jobs.

The public API (everything else is internal to the package):

* :func:`parse_tenant_config` — ``main.yaml`` text → :class:`TenantConfig`
  (tenants and errors), checked against ``Settings.connections``.
* :func:`build_layout` — a :class:`Tenant` and its branches' files
  (:class:`UnparsedBranch`, ``path -> text``) → :class:`LayoutResult`
  (a :class:`Layout` plus :class:`ConfigError` s). Pure, deterministic.
* :func:`freeze_job_graph` — a layout, project, branch, pipeline, changed
  files → :class:`JobGraph` of :class:`FrozenJob` s, or :class:`FreezeError`.
* :meth:`Layout.to_json` / :meth:`Layout.content_hash` — canonical form.
* :func:`speculative_layout` — the layout for an item that proposes
  config files, and the errors it introduces (its result if non-empty).
* :func:`last_good_layout` — a new tenant layout where a branch broken by
  an update keeps its last good files (:class:`KeptBranch` says why);
  branches are named by :class:`BranchKey` (connection, project, branch),
  as in the config cache.

See ``docs/config.md`` for the rules.
"""

from __future__ import annotations

from scheduler.config.errors import ConfigError, FreezeError, YamlError
from scheduler.config.files import SLUICE_FILE, select_config_files
from scheduler.config.freeze import FrozenJob
from scheduler.config.graph import JobGraph, freeze_job_graph
from scheduler.config.layout import Layout, LayoutResult, new_errors
from scheduler.config.loader import UnparsedBranch, build_layout
from scheduler.config.model import (
    Dependency,
    JobVariant,
    Pipeline,
    Playbook,
    ProjectConfig,
    Queue,
    RequiredProject,
    Semaphore,
    Window,
)
from scheduler.config.policies import (
    KeptBranch,
    LastGoodLayout,
    SpeculativeLayout,
    last_good_layout,
    speculative_layout,
)
from scheduler.config.tenant import (
    BranchKey,
    Tenant,
    TenantConfig,
    TenantProject,
    parse_tenant_config,
)

__all__ = [
    "SLUICE_FILE",
    "BranchKey",
    "ConfigError",
    "Dependency",
    "FreezeError",
    "FrozenJob",
    "JobGraph",
    "JobVariant",
    "KeptBranch",
    "LastGoodLayout",
    "Layout",
    "LayoutResult",
    "Pipeline",
    "Playbook",
    "ProjectConfig",
    "Queue",
    "RequiredProject",
    "Semaphore",
    "SpeculativeLayout",
    "Tenant",
    "TenantConfig",
    "TenantProject",
    "UnparsedBranch",
    "Window",
    "YamlError",
    "build_layout",
    "freeze_job_graph",
    "last_good_layout",
    "new_errors",
    "parse_tenant_config",
    "select_config_files",
    "speculative_layout",
]
