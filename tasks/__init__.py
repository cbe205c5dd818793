"""The Celery app and every Sluice task (``celery -A tasks worker``).

Tasks are thin adapters: they decode identifiers, open the ZooKeeper state
and call plain functions in ``scheduler/`` or ``workers/``. Nothing imports
this package; code that must send a task uses :mod:`scheduler.nudge.dispatch`.
"""

from tasks import (  # noqa: F401  (registers the tasks and the log format)
    builder,
    executor,
    launcher,
    logs,
    maintenance,
    merger,
    scheduler,
    system,
)
from tasks.app import app

__all__ = ["app"]
