"""A job's expected duration, as the scheduler sends it with each build.

The mean of the job's recent successful runs (:func:`estimate_duration`),
asked of SQL when the scheduler makes a build request and put in the
request's ``info`` (``estimate``, seconds or null). The executor shows it in
the build's PROGRESS state (Flower, ``AsyncResult.info``) without a
database of its own; a request without the key (made by an older
scheduler) has the executor ask SQL itself (``tasks/executor.py``).

A known estimate is reused for a minute per job and process; a job
without history is asked again at its next build (its first success
gives it one). A database that cannot answer gives no estimate, and is
not asked again for a minute: the pass that makes the request must not
wait on it build after build.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from sqlalchemy.engine import Engine

from scheduler.reporting.queries import estimate_duration

log = logging.getLogger(__name__)

# How long a job's estimate (or a database's failure) is reused.
ESTIMATE_SECONDS = 60.0
# More jobs than this: the remembered estimates are forgotten and asked again.
KEPT_MAX = 10_000


class JobEstimates:
    """Each job's estimate from SQL, remembered for :data:`ESTIMATE_SECONDS`."""

    def __init__(
        self,
        engine: Engine,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.engine = engine
        self.clock = clock
        # (tenant, job, project) -> (estimate, until when on the clock)
        self._known: dict[tuple[str, str, str], tuple[float | None, float]] = {}
        self._failed_until = 0.0

    def of(self, tenant: str, job: str, project: str) -> float | None:
        """Seconds the job is expected to take (rounded to 0.1), or None."""
        key, now = (tenant, job, project), self.clock()
        known = self._known.get(key)
        if known is not None and now < known[1]:
            return known[0]
        if now < self._failed_until:
            return None
        try:
            seconds = estimate_duration(
                self.engine, tenant=tenant, job=job, project=project or None
            )
        except Exception:
            log.warning("no duration estimate for job %s of %s", job, tenant, exc_info=True)
            self._failed_until = now + ESTIMATE_SECONDS
            return None
        if seconds is None:
            return None
        estimate = round(seconds, 1)
        if len(self._known) >= KEPT_MAX:
            self._known.clear()
        self._known[key] = (estimate, now + ESTIMATE_SECONDS)
        return estimate
