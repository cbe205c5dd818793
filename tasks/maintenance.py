"""The maintenance sweep task (on the beat timer every ``sweep_interval`` seconds).

Thin: the steps and their lock are :mod:`scheduler.sweep`; this adapter
opens the process's ZooKeeper client and decides whether merge requests
can be re-nudged (only once a merge task is registered with this app).

``ignore_result=True``: a sweep runs every ``sweep_interval`` on every
maintenance worker's timer, and a report kept in the result backend for
``result_expires`` (an hour) is hundreds of keys nobody reads. Flower shows
the report from the ``task-succeeded`` event; a sweep that fails is stored
all the same (``task_store_errors_even_if_ignored``), so ``sluice retry``
finds it.
"""

from __future__ import annotations

from typing import Any

from scheduler.nudge import task_names
from scheduler.settings.load import load_settings
from scheduler.sweep import node_steps, run_sweep, scheduler_steps, standard_steps
from scheduler.zk.client import process_client
from tasks.app import app


@app.task(name=task_names.SWEEP, ignore_result=True)
def sweep() -> dict[str, Any]:
    """Re-nudge pending requests and scheduler work, record lost requests and nodes, clean up."""
    settings = load_settings()
    client = process_client(settings.zookeeper)
    renudge_merges = task_names.MERGE in app.tasks
    report = run_sweep(
        client,
        lambda: [
            *standard_steps(client, settings, renudge_merges=renudge_merges),
            *scheduler_steps(client, settings),
            *node_steps(client, settings),
        ],
    )
    return report.to_dict()
