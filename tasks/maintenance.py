"""The maintenance sweep task (on the beat timer every ``sweep_interval`` seconds).

Thin: the steps and their lock are :mod:`scheduler.sweep`; this adapter
opens the process's ZooKeeper client and decides whether merge requests
can be re-nudged (only once a merge task is registered with this app).
"""

from __future__ import annotations

from typing import Any

from scheduler.nudge import task_names
from scheduler.settings.load import load_settings
from scheduler.sweep import node_steps, run_sweep, scheduler_steps, standard_steps
from scheduler.zk.client import process_client
from tasks.app import app


@app.task(name=task_names.SWEEP)
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
