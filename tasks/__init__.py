"""The Celery app and every Sluice task (``celery -A tasks worker``).

Tasks are thin adapters: they decode identifiers, open the ZooKeeper state
and call plain functions in ``scheduler/`` or ``workers/``. Nothing imports
this package; code that must send a task uses :mod:`scheduler.dispatch`.
"""

from tasks import executor, maintenance, merger, scheduler, system  # noqa: F401  (registers the tasks)
from tasks.app import app

__all__ = ["app"]
