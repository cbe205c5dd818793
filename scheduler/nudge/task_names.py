"""The name of every Sluice task and the Celery queue it goes to, in one place.

The scheduler sends nudges by name (it never imports ``tasks/``), and the
task adapters register under these same names, so a rename cannot leave a
sender behind. Builds go to their zone's executor queue
(:func:`executor_queue_name`), every other task to its name's queue
(:func:`queue_of`, celeryconfig's ``task_routes``).
"""

from __future__ import annotations

from scheduler.errors import SluiceError

FORWARD_CONNECTION_EVENTS = "sluice.scheduler.forward_connection_events"
PROCESS_TENANT = "sluice.scheduler.process_tenant"
PROCESS_PIPELINE = "sluice.scheduler.process_pipeline"
MERGE = "sluice.merger.run"
RECONFIGURE = "sluice.merger.reconfigure"
BUILD = "sluice.executor.build"
SWEEP = "sluice.maintenance.sweep"
ROUNDTRIP = "sluice.system.roundtrip"
IMAGE_BUILD = "sluice.builder.build"
LAUNCH = "sluice.launcher.serve"

# The Celery queue of each task, by name prefix (celeryconfig's task_routes).
QUEUES = {
    "sluice.scheduler.": "scheduler",
    "sluice.merger.": "merger",
    "sluice.executor.": "executor",
    "sluice.maintenance.": "maintenance",
    "sluice.system.": "maintenance",
    "sluice.builder.": "builder",
    "sluice.launcher.": "launcher",
}


def queue_of(name: str) -> str:
    """The queue task ``name`` is routed to (``scheduler`` for an unknown prefix)."""
    for prefix, queue in QUEUES.items():
        if name.startswith(prefix):
            return queue
    return "scheduler"


class DispatchError(SluiceError, ValueError):
    """A nudge that cannot be sent as asked (an invalid zone name)."""


EXECUTOR_QUEUE = "executor"


def executor_queue_name(zone: str | None = None) -> str:
    """The Celery queue of a zone's executors: ``executor`` or ``executor.<zone>``."""
    if zone is None:
        return EXECUTOR_QUEUE
    if not zone or any(c.isspace() or c == "," for c in zone):
        # A worker names its queues as a comma-separated -Q list.
        raise DispatchError(f"invalid executor zone {zone!r}")
    return f"{EXECUTOR_QUEUE}.{zone}"
