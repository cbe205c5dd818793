"""What a log line is about: the ids of the work in hand, and JSON lines that carry them.

Code that works on something binds its ids for the duration
(``with bound(tenant=..., pipeline=..., build=...):``); every log record
made meanwhile, in this thread, carries them. With ``log_format: json``
(or ``SLUICE_LOG_FORMAT=json``) each worker writes one JSON object per
line with the time, level, logger, message, the bound ids (tenant,
pipeline, item, buildset, build, request, job) and the Celery task's id and
name, so ``grep '"build": "<uuid>"'`` follows one build through the logs of
every worker it touched. The default stays Celery's text format for a
terminal.
"""

from __future__ import annotations

import contextvars
import json
import logging
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from types import MappingProxyType

from scheduler.stores.job_requests import JobRequest

# The ids a log line can carry, in the order a JSON line lists them.
FIELDS = ("tenant", "pipeline", "item", "buildset", "build", "request", "job")

_bound: contextvars.ContextVar[Mapping[str, str]] = contextvars.ContextVar(
    "sluice_log_context", default=MappingProxyType({})
)


@contextmanager
def bound(**ids: str | None) -> Iterator[None]:
    """Bind ``ids`` (empty values are left out) to every log record made inside."""
    fresh = {k: str(v) for k, v in ids.items() if v}
    token = _bound.set({**_bound.get(), **fresh})
    try:
        yield
    finally:
        _bound.reset(token)


def bound_to_request(request: JobRequest, **more: str | None) -> AbstractContextManager[None]:
    """Bind the ids a build or merge request carries (tenant, pipeline, buildset, request)."""
    return bound(
        tenant=request.tenant,
        pipeline=request.pipeline,
        buildset=request.buildset_uuid,
        request=request.uuid,
        **more,
    )


def current() -> Mapping[str, str]:
    """The ids bound now."""
    return _bound.get()


class ContextFilter(logging.Filter):
    """Puts the bound ids on each record (as ``record.sluice``)."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.sluice = dict(_bound.get())
        return True


# The running Celery task's (id, name), or None: set by the task face (tasks/),
# so this module does not import Celery.
TaskOf = Callable[[], "tuple[str, str] | None"]


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, ids, task, exception."""

    def __init__(self, task_of: TaskOf | None = None) -> None:
        super().__init__()
        self.task_of = task_of

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "process": record.process,
        }
        ids: Mapping[str, str] = getattr(record, "sluice", None) or _bound.get()
        for key in FIELDS:
            if key in ids:
                line[key] = ids[key]
        task = self.task_of() if self.task_of is not None else None
        if task is not None:
            line["task_id"], line["task"] = task
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)


def use_json(logger: logging.Logger, task_of: TaskOf | None = None) -> None:
    """Make every handler of ``logger`` write JSON lines with the bound ids."""
    for handler in logger.handlers:
        handler.setFormatter(JsonFormatter(task_of))
        if not any(isinstance(f, ContextFilter) for f in handler.filters):
            handler.addFilter(ContextFilter())
