"""Errors of the layout layer, rooted in :class:`scheduler.errors.SluiceError`."""

from __future__ import annotations

from scheduler.errors import SluiceError


class LayoutError(SluiceError):
    """Base of the errors raised deliberately by :mod:`scheduler.layouts`."""


class TenantNotFoundError(LayoutError):
    """The tenant is not in ``main.yaml`` (or was left out for errors, listed in the message)."""


class NoLayoutError(LayoutError):
    """The tenant has no layout state yet: it was never reconfigured."""


class LayoutMismatchError(LayoutError):
    """A rebuild from the cache gave another layout than the state records."""


class UnknownPipelineError(LayoutError):
    """The pipeline is not defined in the tenant's layout."""


class UnsupportedManagerError(LayoutError):
    """The pipeline's manager has no implementation in this Sluice yet."""


class LockTimeoutError(LayoutError):
    """The tenant lock was not obtained in time (retry later)."""
