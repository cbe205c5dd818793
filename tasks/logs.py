"""Worker log format: Celery's text by default, JSON lines with ``log_format: json``.

Connected to Celery's logging signals, so the worker's own logger and the
task logger both switch (scheduler/logcontext.py has the line format and
the ids each line carries).
"""

from __future__ import annotations

import logging
from typing import Any

from celery import current_task
from celery.signals import after_setup_logger, after_setup_task_logger

from scheduler.logcontext import use_json
from scheduler.settings.load import load_settings


def _task_of() -> tuple[str, str] | None:
    task = current_task
    if task is None or not task.request or not task.request.id:
        return None
    return str(task.request.id), str(task.name)


def _maybe_json(logger: logging.Logger, **_: Any) -> None:
    if load_settings().log_format == "json":
        use_json(logger, _task_of)


@after_setup_logger.connect
def _worker_logger(logger: logging.Logger, **kwargs: Any) -> None:
    _maybe_json(logger)


@after_setup_task_logger.connect
def _task_logger(logger: logging.Logger, **kwargs: Any) -> None:
    _maybe_json(logger)
