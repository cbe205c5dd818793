"""Run in a child process by test_schema: wait for the start signal, then migrate.

Lives in a module of its own so a ``spawn`` child can import it.
"""

from __future__ import annotations

import traceback
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Event

from scheduler.reporting.database import dispose_engines
from scheduler.reporting.schema import ensure_schema


def migrate(database_url: str, start: Event, results: Queue[str]) -> None:
    start.wait(30)
    try:
        results.put(f"ok {ensure_schema(database_url)}")
    except Exception:  # a process boundary: report it to the parent
        results.put(f"error {traceback.format_exc()}")
    finally:
        dispose_engines()
