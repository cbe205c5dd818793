"""One retry policy for the ZooKeeper layer and what builds on it.

Modelled on kazoo's ``KazooRetry``: a policy says how many tries, how long to
wait before each retry (exponential back-off, capped, with optional jitter)
and an overall deadline. It is used two ways:

* ``policy(func)`` calls ``func`` until it returns, retrying on the
  exceptions the policy names (``retry_on``); after the last try the
  exception propagates unchanged.
* ``for attempt in policy.tries():`` for loops whose "try again" is a
  condition rather than an exception (a compare-and-set that lost a race, a
  read that saw a writer mid-way): the iterator sleeps the back-off before
  every attempt after the first and stops when tries or time run out; the
  caller decides what running out means.

The named policies below are the ones the project uses; a new retry loop
picks one of them (or derives one with :func:`dataclasses.replace`) rather
than inventing its own constants. Celery tasks do not use this module: they
retry through Celery (``autoretry_for``/``retry_backoff``, ``tasks/app.py``).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import TypeVar

from scheduler.zk.errors import ZooKeeperUnavailableError

T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently to try again.

    ``max_tries`` counts the first try (None: until ``deadline``); ``delay``
    is the wait before the second try, multiplied by ``backoff`` each time
    and capped at ``max_delay``; ``jitter`` spreads each wait by up to that
    fraction so that contenders do not retry in lockstep; ``deadline`` (in
    seconds from the first try) ends the tries early.
    """

    max_tries: int | None = 5
    delay: float = 0.0
    backoff: float = 2.0
    max_delay: float = 1.0
    jitter: float = 0.0
    deadline: float | None = None
    retry_on: tuple[type[BaseException], ...] = ()

    def __post_init__(self) -> None:
        if self.max_tries is None and self.deadline is None:
            raise ValueError("a retry policy needs max_tries or a deadline")
        if self.max_tries is not None and self.max_tries < 1:
            raise ValueError(f"max_tries must be at least 1, got {self.max_tries}")

    def within(self, seconds: float) -> RetryPolicy:
        """The same policy, ending after ``seconds`` at the latest."""
        return replace(self, deadline=seconds)

    def waits(self) -> Iterator[float]:
        """The waits before the 2nd, 3rd, ... try (endless; :meth:`tries` bounds them)."""
        wait = self.delay
        while True:
            spread = wait * self.jitter * random.random() if self.jitter else 0.0
            yield min(wait + spread, self.max_delay)
            wait = min(wait * self.backoff, self.max_delay)

    def tries(self) -> Iterator[int]:
        """Attempt numbers 1, 2, ...; sleeps the back-off before each retry."""
        end = None if self.deadline is None else time.monotonic() + self.deadline
        waits = self.waits()
        attempt = 1
        while True:
            yield attempt
            if self.max_tries is not None and attempt >= self.max_tries:
                return
            wait = next(waits)
            if end is not None:
                left = end - time.monotonic()
                if left <= 0:
                    return
                wait = min(wait, left)
            if wait > 0:
                time.sleep(wait)  # back-off before a retry, not synchronization
            attempt += 1

    def __call__(
        self,
        func: Callable[[], T],
        *,
        on_retry: Callable[[int, BaseException], None] | None = None,
    ) -> T:
        """``func()``, retried on ``retry_on``; ``on_retry(attempt, exc)`` before each retry.

        When the tries or the deadline run out, the last exception propagates.
        """
        error: BaseException | None = None
        for attempt in self.tries():
            try:
                return func()
            except self.retry_on as exc:
                error = exc
                if self._last(attempt):
                    raise
                if on_retry is not None:
                    on_retry(attempt, exc)
        assert error is not None  # tries() yields at least once
        raise error

    def _last(self, attempt: int) -> bool:
        # tries() decides about the deadline lazily; ask it here without sleeping
        return self.max_tries is not None and attempt >= self.max_tries


# -- the project's policies ---------------------------------------------------

#: A compare-and-set that lost a race reads again at once; many writers
#: (semaphore holders) may contend, so allow many tries with a little jitter.
CONFLICT = RetryPolicy(max_tries=50, delay=0.001, backoff=2.0, max_delay=0.05, jitter=0.5)

#: A reader that met a writer mid-way (shards replaced, an index moved on)
#: reads again at once: the writer's next step is already under way.
TORN_READ = RetryPolicy(max_tries=5)

#: A lock-free reader of a pipeline's tree lets the writer's pass finish.
SETTLE = RetryPolicy(max_tries=25, delay=0.01, backoff=1.5, max_delay=0.1)

#: ZooKeeper unreachable for a moment (an election, a restart): wait and
#: try again, a few times, before the caller's own recovery takes over.
OUTAGE = RetryPolicy(
    max_tries=4, delay=0.5, backoff=2.0, max_delay=4.0, retry_on=(ZooKeeperUnavailableError,)
)

#: Waiting for something durable to appear (a management outcome): keep
#: asking through outages until the caller's deadline (set with ``within``).
PATIENT = RetryPolicy(
    max_tries=None,
    delay=0.2,
    backoff=1.0,
    max_delay=0.2,
    deadline=60.0,
    retry_on=(ZooKeeperUnavailableError,),
)
