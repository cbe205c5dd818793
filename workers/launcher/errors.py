"""The launcher's one error: a node that cannot be made."""

from __future__ import annotations

from scheduler.errors import SluiceError


class LaunchError(SluiceError):
    """A node could not be made (its request fails with the reason) or removed."""
