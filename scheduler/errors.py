"""The one error tree of Sluice.

Every error Sluice raises on purpose derives from :class:`SluiceError`, so a
process boundary (a Celery task, the CLI, a web handler) can tell a known,
explained failure from a bug. Subsystems add their own subclasses next to
their code; only the roots shared by several subsystems live here.
"""

from __future__ import annotations


class SluiceError(Exception):
    """Base of every error Sluice raises deliberately."""


class SettingsError(SluiceError):
    """``sluice.yaml`` (or an environment override) is invalid.

    The message names the file, the line where known, and the key.
    """


class StackError(SluiceError):
    """A component of the local stack failed to start, stop or answer."""
