"""What the merger asks of the forges, as an interface the brain's drivers fill in.

Two things of a merger's work depend on a forge driver: the credentials
git shows to a private repository's remote, and the last step of a gate
on a forge (the forge merges the pull or merge request instead of a push).
The merger names them here and no more; the drivers
(:mod:`scheduler.drivers.merging`) implement them, and the Celery app
installs that implementation in every worker process (``tasks/app.py``).
Until one is installed (a merger used on its own: benchmarks, tests of
plain git) there are no forges: git gets no extra credentials and a push
to a forge connection fails with the reason.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from scheduler.settings.sections import ConnectionSettings
from scheduler.wire.merger import Failure, PushJob, PushResult, Status


class Forges(Protocol):
    """The forge drivers, as the merger sees them."""

    @property
    def drivers(self) -> frozenset[str]:
        """The connection drivers whose changes their forge merges (``github``, ...)."""

    def git_env(
        self, connection: ConnectionSettings | None, project: str, env: Mapping[str, str]
    ) -> Mapping[str, str]:
        """What git's environment needs to reach ``project``'s remote (``{}``: nothing)."""

    def merge(self, job: PushJob, connection: ConnectionSettings) -> PushResult:
        """Report the gate's success to the forge, then ask it to merge the change."""


class NoForges:
    """The merger without forge drivers."""

    drivers: frozenset[str] = frozenset()

    def git_env(
        self, connection: ConnectionSettings | None, project: str, env: Mapping[str, str]
    ) -> Mapping[str, str]:
        return {}

    def merge(self, job: PushJob, connection: ConnectionSettings) -> PushResult:
        why = f"no forge driver for {connection.driver!r} in this worker"
        return PushResult(job.job_id, Status.FAILED, failure=Failure("invalid", why))


_installed: list[Forges] = [NoForges()]


def install(forges: Forges) -> None:
    """Use ``forges`` in this process (the Celery app does, at import)."""
    _installed[0] = forges


def installed() -> Forges:
    return _installed[0]
