"""Layout-building policies on top of :func:`build_layout`: last good config, speculative config.

Two situations need more than one layout build:

* **A branch update breaks its configuration.** :func:`last_good_layout`
  builds the new layout; a branch whose files changed since its last good
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

Why these live in the configuration package and not with the
reconfiguration (:mod:`scheduler.reconfiguration`): they are pure
functions of a tenant and its branches' files, deciding which files a
layout is built from, like :func:`build_layout` itself; they read and write
nothing. The reconfiguration flow (where the files come from, the config
cache, the tenant locks, the layout state, the requests) calls
:func:`last_good_layout`; the speculative layout of an item is not a
reconfiguration at all (the layouts' freezer calls it for every item that
changes config).

Branches are named by :class:`~scheduler.config.tenant.BranchKey`, the
key the config cache uses too.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from scheduler.config.errors import ConfigError
from scheduler.config.layout import LayoutResult, new_errors
from scheduler.config.loader import UnparsedBranch, build_layout
from scheduler.config.tenant import BranchKey, Tenant


@dataclass(frozen=True)
class KeptBranch:
    """A branch that kept its last good configuration, and why."""

    key: BranchKey
    errors: tuple[ConfigError, ...]

    @property
    def project(self) -> str:
        return self.key.project

    @property
    def branch(self) -> str:
        return self.key.branch


@dataclass(frozen=True)
class LastGoodLayout:
    result: LayoutResult
    kept: tuple[KeptBranch, ...] = ()


@dataclass(frozen=True)
class SpeculativeLayout:
    result: LayoutResult
    # errors the proposed files introduce; non-empty means the item fails
    errors: tuple[ConfigError, ...] = ()


def last_good_layout(
    tenant: Tenant,
    branches: Sequence[UnparsedBranch],
    last_good: Mapping[BranchKey, UnparsedBranch],
) -> LastGoodLayout:
    """Build the tenant layout, keeping the last good files of broken branches."""

    def key(branch: UnparsedBranch) -> BranchKey:
        return tenant.branch_key(branch.project, branch.branch)

    current = build_layout(tenant, branches)
    baseline = build_layout(tenant, [last_good.get(key(b), b) for b in branches])
    introduced = new_errors(baseline.errors, current.errors)
    changed = {
        key(b) for b in branches if key(b) in last_good and last_good[key(b)].files != b.files
    }
    blamed = {tenant.branch_key(e.project, e.branch) for e in introduced}
    broken = sorted(blamed & changed)
    if not broken:
        return LastGoodLayout(current)
    fallback = [last_good[key(b)] if key(b) in broken else b for b in branches]
    kept = tuple(
        KeptBranch(k, tuple(e for e in introduced if tenant.branch_key(e.project, e.branch) == k))
        for k in broken
    )
    return LastGoodLayout(build_layout(tenant, fallback), kept)


def speculative_layout(
    tenant: Tenant,
    branches: Sequence[UnparsedBranch],
    proposed: Iterable[UnparsedBranch],
) -> SpeculativeLayout:
    """The layout an item would run with, and the errors its files introduce."""
    merged = {tenant.branch_key(b.project, b.branch): b for b in branches}
    merged.update({tenant.branch_key(b.project, b.branch): b for b in proposed})
    base = build_layout(tenant, branches)
    result = build_layout(tenant, list(merged.values()))
    return SpeculativeLayout(result, tuple(new_errors(base.errors, result.errors)))
