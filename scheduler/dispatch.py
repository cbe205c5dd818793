"""Sending nudges by task name, so the scheduler never imports ``tasks/``.

A nudge names what to look at (a tenant and pipeline, a request uuid);
secrets and parameters never travel through the broker.
"""

from __future__ import annotations

import functools
from typing import Any

from celery import Celery

from scheduler.settings import Settings, load_settings


@functools.cache
def _client_app(broker_url: str) -> Celery:
    app = Celery("sluice-client", set_as_current=False)
    app.config_from_object("celeryconfig")
    app.conf.update(broker_url=broker_url, result_backend=broker_url)
    return app


def client_app(settings: Settings | None = None) -> Celery:
    """A Celery app for sending tasks and control commands (no task code)."""
    settings = settings or load_settings()
    return _client_app(settings.broker_url)


def send(name: str, *args: Any, settings: Settings | None = None, **options: Any) -> Any:
    """Send task ``name`` with identifier arguments; returns its AsyncResult."""
    return client_app(settings).send_task(name, args=list(args), **options)
