"""Elections: one leader among the processes contending on a path (kazoo ``Election``).

Guarantees: at most one contender runs its leader function at a time per
path while sessions are healthy; when the leader's function returns, raises
or its process dies (ephemeral node gone within the session timeout), the
next contender in line becomes leader.

On SUSPENDED the leader keeps running but must check :meth:`Election.is_leader`
(false while suspended or after LOST) before acting; on LOST its node is
gone and another contender may already lead, so :meth:`is_leader` is false
for good and the leader function should return. Leadership is a kazoo lock
underneath, so a leader may fence its writes with :attr:`Election.context`.
"""

from __future__ import annotations

from collections.abc import Callable

from kazoo.recipe.election import Election as KazooElection

from scheduler.zk import paths
from scheduler.zk.client import ZooKeeperClient
from scheduler.zk.context import LockContext


class Election:
    """Contend for leadership at ``path``; :meth:`run` blocks until elected."""

    def __init__(self, client: ZooKeeperClient, path: str, identifier: str = "") -> None:
        self.client = client
        self.path = path
        self._election = KazooElection(client.kazoo, path, identifier)
        self.context: LockContext | None = None

    def run(self, leader: Callable[[Election], None]) -> None:
        """Wait to be elected, then call ``leader(self)``; leadership ends when it returns."""

        def lead() -> None:
            lock = self._election.lock
            self.context = LockContext(self.client, paths.join(lock.path, lock.node))
            try:
                leader(self)
            finally:
                self.context.mark_released()

        self._election.run(lead)

    def is_leader(self) -> bool:
        return self.context is not None and self.context.valid

    def cancel(self) -> None:
        """Stop contending (a waiting :meth:`run` raises kazoo's CancelledError)."""
        self._election.cancel()

    def contenders(self) -> list[str]:
        return list(self._election.contenders())
