"""One build followed through every worker's log: JSON lines with the ids of the work."""

from __future__ import annotations

import json
import logging
from typing import Any

from scheduler import logcontext
from tests.e2e.system import SluiceSystem
from tests.e2e.test_check_pipeline import prepare_check
from tests.fixtures.workers import WorkerProcess

JSON = {"SLUICE_LOG_FORMAT": "json"}


def _lines(worker: WorkerProcess) -> list[dict[str, Any]]:
    found = []
    for line in worker.log_text().splitlines():
        if line.startswith("{"):  # the worker's start banner is plain text
            found.append(json.loads(line))
    return found


def test_one_build_through_every_workers_log(system: SluiceSystem) -> None:
    prepare_check(system)
    scheduler = system.start_worker(("scheduler",), env=JSON)
    merger = system.start_worker(("merger", "maintenance"), env=JSON)
    executor = system.start_worker(("executor",), env=JSON)
    system.sluice("reconfigure")
    system.enqueue("feature")
    system.sluice("wait", "--idle", "--timeout", "90")
    lint = next(b for b in system.builds() if b["job"] == "lint")

    on_executor = [x for x in _lines(executor) if x.get("build") == lint["uuid"]]
    assert on_executor, executor.log_text()[-2000:]
    for line in on_executor:
        assert (line["tenant"], line["pipeline"], line["job"]) == ("demo", "check", "lint")
        assert line["task"] == "sluice.executor.build" and line["task_id"]
    buildset = on_executor[0]["buildset"]
    merges = [x for x in _lines(merger) if x.get("buildset") == buildset]
    assert merges and all(x["task"] == "sluice.merger.run" for x in merges)
    passes = [x for x in _lines(scheduler) if x.get("pipeline") == "check"]
    assert passes and all(x["tenant"] == "demo" for x in passes)


def test_json_lines_carry_bound_ids_and_exceptions() -> None:
    record = logging.LogRecord("sluice.test", logging.ERROR, __file__, 1, "boom %s", ("x",), None)
    formatter = logcontext.JsonFormatter(lambda: ("t-1", "sluice.executor.build"))
    with logcontext.bound(tenant="demo", build="b1", job=None):
        logcontext.ContextFilter().filter(record)
    try:
        raise ValueError("bad")
    except ValueError:
        import sys

        record.exc_info = sys.exc_info()
    line = json.loads(formatter.format(record))
    assert line["message"] == "boom x" and line["level"] == "ERROR"
    assert (line["tenant"], line["build"], line["task_id"]) == ("demo", "b1", "t-1")
    assert "job" not in line and "ValueError: bad" in line["exception"]
    assert logcontext.current() == {}
