"""The launcher task: a nudge naming a node request; the work is in ``workers/launcher``.

``sluice.launcher.serve REQUEST`` serves the request if nobody else does
(:func:`workers.launcher.launcher.serve_request`): the request's lock, not
the message, decides who serves it, so a duplicate delivery costs one lock
attempt and returns ``busy`` or ``done``. A launcher killed while serving
leaves the request ``pending``; its lock goes with its ZooKeeper session and
the next check (any launcher's) puts it back to ``requested`` and nudges it.
A request a pipeline job made (``notify``) has its outcome put into the
pipeline's result queue by the fulfilling or failing write; the task then
nudges the pipeline.
"""

from __future__ import annotations

from typing import Any

from scheduler.errors import SluiceError
from scheduler.nudge import dispatch, task_names
from scheduler.settings.load import load_settings
from scheduler.zk.client import process_client
from tasks import retrying
from tasks.app import app
from workers.launcher.launcher import Launcher, serve_request


class LaunchTaskError(SluiceError):
    """The task was sent without a node request id."""


@app.task(name=task_names.LAUNCH, acks_late=True, **retrying.WORKER)
def serve(request_id: str) -> dict[str, Any]:
    """Serve node request ``request_id`` now, if nobody else does."""
    if not isinstance(request_id, str) or not request_id:
        raise LaunchTaskError(f"{task_names.LAUNCH}: request_id must be a non-empty id")
    settings = load_settings()
    launcher = Launcher(settings, process_client(settings.zookeeper))
    outcome = serve_request(launcher, request_id)
    if outcome.pipeline is not None:
        # its outcome is already in the pipeline's result queue (same transaction);
        # a lost nudge is re-sent by the sweep, which sees the queued event
        tenant, pipeline = outcome.pipeline
        dispatch.send(task_names.PROCESS_PIPELINE, tenant, pipeline, settings=settings)
    return outcome.to_dict()
