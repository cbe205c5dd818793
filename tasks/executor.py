"""The build task: a nudge naming an executor request; the work is in the service.

The service is :mod:`workers.executor.service`; docs/executor.md has the lifecycle.

``acks_late=False`` on purpose: the message is acknowledged when the task
starts, because a build may run for hours, longer than the broker's
visibility timeout, and must not be delivered again while it runs. What
protects the build is its ZooKeeper claim, not the message (docs/celery.md,
"Acknowledgement and redelivery"): a worker that dies after claiming leaves
a request that the sweep records as lost, and a message lost before the
claim is re-sent by the sweep from ``pending()``.
"""

from __future__ import annotations

from typing import Any

from celery import Task

from scheduler import dispatch, tasknames
from scheduler.errors import SluiceError
from scheduler.settings import load_settings
from scheduler.zk.client import process_client
from scheduler.zk.errors import ZooKeeperUnavailableError
from tasks.app import app
from workers.executor.service import execute, worker_name

# Retries when ZooKeeper is unreachable (before the claim, or at completion
# after the claim was released): back-off doubling from RETRY_DELAY seconds.
MAX_RETRIES = 5
RETRY_DELAY = 2.0


class BuildRequestError(SluiceError):
    """The task was sent with arguments that name no request."""


def _request_uuid(value: object) -> str:
    if not isinstance(value, str) or not value:
        raise BuildRequestError(
            f"sluice.executor.build: request_uuid must be a uuid, got {value!r}"
        )
    return value


def _zone(value: object) -> str | None:
    if value is not None and (not isinstance(value, str) or not value):
        raise BuildRequestError(
            f"sluice.executor.build: zone must be a name or null, got {value!r}"
        )
    return value


@app.task(name=tasknames.BUILD, bind=True, acks_late=False, max_retries=MAX_RETRIES)
def build(self: Task[Any, Any], request_uuid: str, zone: str | None = None) -> dict[str, Any]:
    """Claim the build request ``request_uuid`` of ``zone``, run it and store its result."""
    uuid, zone_name = _request_uuid(request_uuid), _zone(zone)
    settings = load_settings()
    try:
        client = process_client(settings.zookeeper)
        report = execute(
            settings,
            client,
            uuid,
            zone_name,
            worker_name(self.request.hostname),
            notify=lambda request: dispatch.notify_pipeline(request, settings),
        )
    except ZooKeeperUnavailableError as exc:
        raise self.retry(exc=exc, countdown=RETRY_DELAY * 2**self.request.retries) from exc
    return report.to_dict()
