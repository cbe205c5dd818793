"""Policies on top of :func:`build_layout`: last good config, speculative config.

Two situations need more than one layout build:

* **A branch update breaks its configuration.** :func:`reconfigure` builds
  the new layout; a branch whose files changed since its last good
  version and that now carries errors of its own that the last good
  version did not have keeps its last good files, and the errors are
  returned so they can be reported. Errors caused elsewhere (a config
  project removes a job an untrusted project uses) are reported and the
  new layout is taken: the other side's change is the one gated.
* **A change proposes configuration.** :func:`speculative_layout` builds
  the layout with the change's files in place of its branches' and
  returns the errors the change introduces (compared without line
  numbers, since a change moves lines). Non-empty: the item fails with
  those errors as its result and the tenant's layout is untouched.

Where the files come from (merger, ZooKeeper config cache) and the tenant
locks around a reconfiguration are the caller's business.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from scheduler.config.errors import ConfigError
from scheduler.config.layout import LayoutResult, new_errors
from scheduler.config.loader import UnparsedBranch, build_layout
from scheduler.config.tenant import Tenant

BranchKey = tuple[str, str]


@dataclass(frozen=True)
class KeptBranch:
    """A branch that kept its last good configuration, and why."""

    project: str
    branch: str
    errors: tuple[ConfigError, ...]


@dataclass(frozen=True)
class Reconfiguration:
    result: LayoutResult
    kept: tuple[KeptBranch, ...] = ()


@dataclass(frozen=True)
class SpeculativeLayout:
    result: LayoutResult
    # errors the proposed files introduce; non-empty means the item fails
    errors: tuple[ConfigError, ...] = ()


def _key(branch: UnparsedBranch) -> BranchKey:
    return (branch.project, branch.branch)


def reconfigure(
    tenant: Tenant,
    branches: Sequence[UnparsedBranch],
    last_good: Mapping[BranchKey, UnparsedBranch],
) -> Reconfiguration:
    """Build the tenant layout, keeping the last good files of broken branches."""
    current = build_layout(tenant, branches)
    baseline = build_layout(tenant, [last_good.get(_key(b), b) for b in branches])
    introduced = new_errors(baseline.errors, current.errors)
    changed = {
        _key(b) for b in branches if _key(b) in last_good and last_good[_key(b)].files != b.files
    }
    broken = sorted({(e.project, e.branch) for e in introduced} & changed)
    if not broken:
        return Reconfiguration(current)
    fallback = [last_good[_key(b)] if _key(b) in broken else b for b in branches]
    kept = tuple(
        KeptBranch(key[0], key[1], tuple(e for e in introduced if (e.project, e.branch) == key))
        for key in broken
    )
    return Reconfiguration(build_layout(tenant, fallback), kept)


def speculative_layout(
    tenant: Tenant,
    branches: Sequence[UnparsedBranch],
    proposed: Iterable[UnparsedBranch],
) -> SpeculativeLayout:
    """The layout an item would run with, and the errors its files introduce."""
    merged = {_key(b): b for b in branches}
    merged.update({_key(b): b for b in proposed})
    base = build_layout(tenant, branches)
    result = build_layout(tenant, list(merged.values()))
    return SpeculativeLayout(result, tuple(new_errors(base.errors, result.errors)))
