"""Celery settings for every Sluice worker and client.

Read from ``sluice.yaml`` (see :mod:`scheduler.settings`); environment
variables override it. The reliability settings are the ones the
invariants of docs/architecture.md rely on; docs/celery.md explains each.
"""

from __future__ import annotations

from kombu import Queue

from scheduler.nudge import task_names
from scheduler.settings.exposure import broker_ssl_options
from scheduler.settings.load import load_settings

_settings = load_settings()

# With its password when one is configured (or the local stack made one):
# redis://:<password>@host:port/db. Celery and Flower print it redacted.
broker_url = _settings.broker_url
# Results live in ZooKeeper and SQL; the backend only carries small task
# return values (round trips, pings) for operators and tests.
result_backend = _settings.broker_url
# A rediss:// broker: the CA, certificate and key of broker.tls, for both.
broker_use_ssl = broker_ssl_options(_settings.broker_url, _settings.broker.tls) or False
redis_backend_use_ssl = broker_ssl_options(_settings.broker_url, _settings.broker.tls)
result_expires = 3600
# A result keeps its task's name and arguments (identifiers only), so that
# `sluice retry TASK_ID` can send the same task again (scheduler/nudge/resend.py).
result_extended = True

# Nudges, not orders: a message carries identifiers only, as JSON.
task_serializer = "json"
result_serializer = "json"
accept_content = ["json"]

# A task is acknowledged after it ran, and a message whose worker process
# died (SIGKILL, OOM) goes back to the queue instead of being marked failed.
task_acks_late = True
task_reject_on_worker_lost = True
# Each worker process reserves one message at a time: a long build never
# holds a second message hostage.
worker_prefetch_multiplier = 1
# Redis redelivers an unacknowledged message after this many seconds even
# while it still runs; builds are safe because they claim their ZooKeeper
# request (docs/celery.md).
broker_transport_options = {"visibility_timeout": _settings.visibility_timeout}
result_backend_transport_options = {"visibility_timeout": _settings.visibility_timeout}
broker_connection_retry_on_startup = True

# Events for Flower.
worker_send_task_events = True
task_send_sent_event = True
task_track_started = True
# ... published over the process's kept Redis connection (tasks/fastevents.py,
# scheduler/nudge/kept_connection.py: this is its SETTING).
sluice_fast_events = _settings.broker.fast_send
# The scheduler's hops store no result (tasks/scheduler.py), but a failed one
# is stored all the same: ``sluice retry`` finds it in the result backend.
task_store_errors_even_if_ignored = True

task_default_queue = "scheduler"
task_queues = (
    Queue("scheduler"),
    Queue("merger"),
    Queue("executor"),
    Queue("maintenance"),
    # image builders (seed 004, docs/nodes.md)
    Queue("builder"),
    # node launchers (issue 19, docs/nodes.md)
    Queue("launcher"),
)
task_routes = {f"{prefix}*": {"queue": queue} for prefix, queue in task_names.QUEUES.items()}

# Every maintenance worker runs the timer (``--beat``): the sweep re-nudges
# pending requests and records lost ones (scheduler/sweep.py); its ZooKeeper
# lock lets one sweep run at a time, so several timers are safe and losing
# one stops nothing. A sweep message older than one interval is dropped, the
# next one is on its way.
beat_schedule = {
    "sluice-sweep": {
        "task": task_names.SWEEP,
        "schedule": _settings.sweep_interval,
        "options": {"expires": _settings.sweep_interval},
    },
}

worker_hijack_root_logger = False
worker_redirect_stdouts = False
