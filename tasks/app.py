"""The Celery application object."""

from __future__ import annotations

import gc
from typing import Any

from celery import Celery
from celery.signals import worker_init, worker_process_init, worker_process_shutdown

from scheduler import processlocal
from scheduler.drivers.merging import DriverForges
from scheduler.stores import timings
from tasks import consumer, profiling
from tasks.gathering import GatherersStep
from workers import bootsteps
from workers.images.loop import ImageBuilderStep
from workers.launcher.loop import LauncherStep
from workers.merger import forges

# Channels of a lost broker connection raise a connection error, not an
# AttributeError that stops the worker (tasks/consumer.py).
consumer.install()
# The merger reaches private repositories and merges on forges through the
# drivers (workers/merger/forges.py).
forges.install(DriverForges())

# Task events are published over the kept Redis connection (tasks/fastevents.py).
app = Celery("sluice", events="tasks.fastevents:FastEvents")
app.config_from_object("celeryconfig")
# The worker registers in ZooKeeper's component registry and closes its
# per-process resources when it stops (workers/bootsteps.py).
app.steps["worker"].add(bootsteps.Registration)
app.steps["worker"].add(GatherersStep)
app.steps["worker"].add(bootsteps.Resources)
# A worker that consumes ``builder`` checks its images on a thread (seed 004).
app.steps["worker"].add(ImageBuilderStep)
# A worker that consumes ``launcher`` checks node requests on a thread (issue 19).
app.steps["worker"].add(LauncherStep)


# A prefork child never uses its parent's ZooKeeper client, engines or
# runtime: scheduler/processlocal.py forgets them at the fork, and the child
# makes its own on first use (never here: a worker_process_init handler
# that blocks for 4 s gets the child killed).


# The objects a pool process inherits are frozen on both sides of the fork
# (``gc.freeze``: the cyclic collector never walks them again). A collection
# writes to every object it walks, so without this each full collection, in
# the worker or in a child, copied more of the pages they share (copy on
# write), and each pool's memory grew through the day (docs/performance.md,
# "A peak day"). They are the imports and the worker's setup, which live as
# long as the process anyway.
@worker_init.connect
def _freeze_before_forking(**_: Any) -> None:
    gc.freeze()


@worker_process_init.connect
def _freeze_what_was_inherited(**_: Any) -> None:
    gc.freeze()


@worker_process_shutdown.connect
def _close_process_resources(**_: Any) -> None:
    timings.flush_all()  # while the clients are open
    processlocal.close_all()


# SLUICE_PROFILE_DIR: every pool process profiles itself (tasks/profiling.py).
profiling.install()
