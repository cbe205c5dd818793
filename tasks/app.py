"""The Celery application object."""

from __future__ import annotations

from typing import Any

from celery import Celery
from celery.signals import worker_process_init, worker_process_shutdown

from scheduler.zk import client as zk_client

app = Celery("sluice")
app.config_from_object("celeryconfig")


@worker_process_init.connect
def _fresh_zookeeper_client(**_: Any) -> None:
    # A prefork child must not use its parent's kazoo client; the client is
    # created lazily on first use in this process (never blocking here: a
    # slow handler gets the child killed after 4 s).
    zk_client.forget_inherited_clients()


@worker_process_shutdown.connect
def _close_zookeeper_client(**_: Any) -> None:
    zk_client.close_process_clients()
