"""The name of every Sluice task, in one place.

The scheduler sends nudges by name (it never imports ``tasks/``), and the
task adapters register under these same names, so a rename cannot leave a
sender behind.
"""

from __future__ import annotations

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
