"""Sending a Sluice task again by its id: the operator's task-level retry.

``sluice retry TASK_ID`` finds what the task was (its name and arguments)
and sends the same task again, under a new id. It is safe by construction:
every Sluice task is a nudge whose arguments are identifiers and whose
effect is idempotent (a finished build or merge is found completed and the
retry returns ``duplicate``; a pipeline or tenant with nothing to do does
nothing). Retrying a nudge that was lost before any worker ran it does the
work it was meant to start.

Where the task is looked up, in order:

* the result backend (``result_extended`` keeps a task's name and
  arguments with its result): any build, merge or other task a worker
  ran, and any scheduler hop that failed (a hop that succeeded stores no
  result: tasks/scheduler.py);
* Flower's API (``--flower URL``): also a task that was sent but never
  ran, if Flower saw it sent (through Celery: a fast send publishes no
  ``task-sent`` event, :mod:`scheduler.nudge.kept_connection`). Flower knows its
  arguments as the task's label (:mod:`scheduler.nudge.task_labels`), which names
  every identifier the task needs.
"""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from scheduler.errors import SluiceError
from scheduler.nudge import dispatch, task_labels, task_names
from scheduler.settings.sections import Settings

SLUICE_PREFIX = "sluice."


class TaskNotFoundError(SluiceError):
    """Neither the result backend nor Flower knows the task."""


class NotRetryableError(SluiceError):
    """The task is not one Sluice can send again."""


@dataclass(frozen=True)
class KnownTask:
    """A task as found: its name and arguments, and where they were read."""

    task_id: str
    name: str
    args: list[Any]
    kwargs: dict[str, Any] = field(default_factory=dict)
    source: str = "the result backend"


def from_backend(task_id: str, settings: Settings) -> KnownTask | None:
    """The task as the result backend recorded it (None if it has no record)."""
    result = dispatch.client_app(settings).AsyncResult(task_id)
    try:
        name = result.name
    except AttributeError:
        return None
    if not name:  # PENDING: the backend knows nothing of this id
        return None
    return KnownTask(task_id, str(name), list(result.args or []), dict(result.kwargs or {}))


def _flower_request(flower_url: str, path: str) -> urllib.request.Request:
    """A request to Flower's API; credentials in the URL become basic auth."""
    parts = urlsplit(flower_url)
    netloc = parts.hostname or ""
    if parts.port:
        netloc = f"{netloc}:{parts.port}"
    url = urlunsplit((parts.scheme, netloc, parts.path.rstrip("/") + path, "", ""))
    request = urllib.request.Request(url)
    if parts.username is not None:
        token = base64.b64encode(f"{parts.username}:{parts.password or ''}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    return request


def from_flower(task_id: str, flower_url: str) -> KnownTask | None:
    """The task as Flower saw it (None if Flower does not know it)."""
    request = _flower_request(flower_url, f"/api/task/info/{task_id}")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            info = json.loads(response.read())
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return None
        raise TaskNotFoundError(
            f"Flower at {flower_url} answered {exc.code}: {exc.reason}"
        ) from None
    except (OSError, ValueError) as exc:
        raise TaskNotFoundError(f"Flower at {flower_url} did not answer: {exc}") from None
    name = str(info.get("name") or "")
    if not name:
        return None
    try:
        args, kwargs = task_labels.arguments(name, str(info.get("args") or ""))
    except task_labels.LabelError as exc:
        raise NotRetryableError(str(exc)) from None
    return KnownTask(task_id, name, args, kwargs, source="Flower")


def find(task_id: str, settings: Settings, flower_url: str | None = None) -> KnownTask:
    """What task ``task_id`` was; :class:`TaskNotFoundError` when nobody knows."""
    known = from_backend(task_id, settings)
    if known is None and flower_url:
        known = from_flower(task_id, flower_url)
    if known is None:
        where = "the result backend" + (" or Flower" if flower_url else "")
        hint = (
            ""
            if flower_url
            else " (Flower knows tasks that never ran, and the builds, merges and hops"
            " that ended well: --flower URL)"
        )
        raise TaskNotFoundError(f"task {task_id} is unknown to {where}{hint}")
    return known


def send_again(task: KnownTask, settings: Settings) -> str:
    """Send ``task`` again (same name and arguments, a new id); the new task id."""
    if not task.name.startswith(SLUICE_PREFIX):
        raise NotRetryableError(f"{task.name} is not a Sluice task")
    options: dict[str, Any] = {"queue": task_names.queue_of(task.name)}
    if task.name == task_names.BUILD:
        options["queue"] = task_names.executor_queue_name(task.kwargs.get("zone"))
    result = dispatch.send(
        task.name,
        *task.args,
        settings=settings,
        label=task_labels.label(task.name, [*task.args, *task.kwargs.values()]),
        kwargs=task.kwargs,
        **options,
    )
    return str(result.id)
