"""An opt-in count of a process's ZooKeeper requests, by kind and path shape.

``SLUICE_ZK_TRACE=DIR`` makes every client this process connects count the
requests it sends (every thread, the watchdog's pings included) and write
them to ``DIR/zk-trace-<pid>.json`` about once a second: ``{"<Kind> <shape>":
count}``, where the shape is the path with its uuids, sequence numbers and
hashes replaced (``/tenant/t/pipeline/check/item/{id}``). Meant for finding
where a build's requests go (docs/performance.md); off by default, and it
costs a dict update per request when on.
"""

from __future__ import annotations

import json
import os
import re
import threading
from collections import Counter
from pathlib import Path
from typing import Any

TRACE_ENV = "SLUICE_ZK_TRACE"
FLUSH_SECONDS = 1.0
_ID = re.compile(r"(?<=/)(?:[0-9a-f]{16,}|[^/]*?\d{6,}[^/]*)(?=/|$)")


def shape(path: str) -> str:
    """``path`` with the parts that vary per object replaced by ``{id}``."""
    return _ID.sub("{id}", path)


class RequestTrace:
    """Counts of one process's requests, written to a file by a daemon thread."""

    def __init__(self, folder: Path) -> None:
        self.file = folder / f"zk-trace-{os.getpid()}.json"
        self.counts: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._dirty = threading.Event()
        thread = threading.Thread(target=self._flush_forever, name="sluice-zk-trace", daemon=True)
        thread.start()

    def add(self, request: Any) -> None:
        key = f"{type(request).__name__} {shape(str(getattr(request, 'path', '')))}"
        with self._lock:
            self.counts[key] += 1
        self._dirty.set()

    def _flush_forever(self) -> None:
        while True:
            self._dirty.wait()
            self._dirty.clear()
            with self._lock:
                text = json.dumps(dict(self.counts.most_common()), indent=1)
            partial = self.file.with_suffix(".tmp")
            partial.write_text(text)
            partial.replace(self.file)
            threading.Event().wait(FLUSH_SECONDS)


_traces: dict[int, RequestTrace] = {}
_traces_lock = threading.Lock()


def process_trace() -> RequestTrace | None:
    """This process's trace when ``SLUICE_ZK_TRACE`` names a folder (one per pid)."""
    folder = os.environ.get(TRACE_ENV)
    if not folder:
        return None
    with _traces_lock:
        trace = _traces.get(os.getpid())
        if trace is None:
            Path(folder).mkdir(parents=True, exist_ok=True)
            trace = _traces[os.getpid()] = RequestTrace(Path(folder))
        return trace


def summed(folder: Path) -> Counter[str]:
    """Every process's counts in ``folder``, added up (for the benchmark's table)."""
    total: Counter[str] = Counter()
    for file in folder.glob("zk-trace-*.json"):
        total.update(json.loads(file.read_text()))
    return total
