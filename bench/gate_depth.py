"""Pipeline pass cost at depth: a gate of 10, 100 and 500 items, one build result each.

A dependent pipeline in a real ZooKeeper (its own, on a free port), driven
directly with ``scheduler.processing.pipeline.process_pipeline`` and no
workers: a fixed one-job layout, an unlimited window so every item has a
running build, the benchmark playing merger and executor. Then, repeatedly,
one build of an item near the back completes (the item waits for those
ahead, so the depth stays the same) and:

* the **working pass** applies it: *pass ms* (``PipelinePass.run``) and its
  *CPU ms* (``time.process_time``: this process, kazoo's thread included), *run
  ms* (the whole ``process_pipeline``: lock, pass, unlock), the bytes of
  its transactions (``Transaction.size``), and the server's counters over
  the run: bytes of znode data written (per-namespace write counters),
  bytes received (``zk_bytes_received_count``: every request) and bytes
  sent (``zk_response_bytes``: what the process read), write requests;
* the **confirming pass** follows: ``process_pipeline`` once more with no
  new event in any queue (what a nudge whose event was already applied
  costs), with the same figures.

Medians over the samples; the last row is the deepest over the shallowest
(issue 17: within 2x). ``bench/throughput.py`` runs the same phase.

``.venv/bin/python bench/gate_depth.py [--depths 10 100 500] [--samples 15]
[--profile 500] [--sort tottime]`` (``--profile D``: a cProfile of the working
runs at depth D, sorted by cumulative time or ``--sort``, printed after the table).
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _system import Services

from scheduler.manager.dependent import DependentManager
from scheduler.manager.settings import PipelineSettings
from scheduler.manager.window import WindowSettings
from scheduler.model.build import JobInfo
from scheduler.model.item import QueueItem
from scheduler.processing import pipeline as processing
from scheduler.processing.environment import Environment, NewRequest
from scheduler.state.store import PipelineStore
from scheduler.stores import timings
from scheduler.stores.job_requests import JobRequestQueue
from scheduler.stores.ledger import TxnLedger
from scheduler.wire.events import JobResult
from scheduler.zk import context as zk_context
from scheduler.zk import paths
from scheduler.zk.client import ZooKeeperClient, connect
from scheduler.zk.event_queue import EventQueue
from tests.scheduler.world import Formats

TENANT = "bench"
PIPELINE = "gate"
# mntr counters: bytes the server received (requests, writes included) and
# sent (responses: what clients read), write requests applied (a multi once)
BYTES_IN = "zk_bytes_received_count"
BYTES_OUT = "zk_response_bytes"
WRITES = "zk_cnt_updatelatency"


class OneJob:
    def freeze(self, item: Any, outcome: Any) -> Any:
        from scheduler.manager.settings import FreezeResult

        return FreezeResult((JobInfo("unit"),))


class GateFormats(Formats):
    """The tests' request formats; a gate without ``merge: true`` never pushes."""

    def push(self, tenant: str, pipeline: str, item: QueueItem, request_uuid: str) -> NewRequest:
        raise NotImplementedError("the benchmark's gate does not push")

    def push_outcome(self, result: JobResult) -> tuple[bool, str]:
        raise NotImplementedError("the benchmark's gate does not push")


class GateManagers:
    def open(self, client: ZooKeeperClient, tenant: str, pipeline: str) -> Any:
        ledger = TxnLedger(client, tenant)
        settings = PipelineSettings(pipeline, manager="dependent", window=WindowSettings(window=0))
        return DependentManager(settings, OneJob(), ledger), ledger


@dataclass
class PassRecord:
    seconds: float
    cpu_seconds: float  # of this process (the pass and kazoo's thread)
    worked: bool
    txn_bytes: int
    txns: int


@contextmanager
def recording() -> Iterator[list[PassRecord]]:
    """Record every PipelinePass.run: its time and the bytes its transactions commit."""
    records: list[PassRecord] = []
    committed: list[int] = []
    original_run = processing.PipelinePass.run
    original_commit = zk_context.Transaction.commit

    def commit(self: zk_context.Transaction) -> list[Any]:
        committed.append(self.size if len(self) else 0)
        return original_commit(self)

    def run(self: processing.PipelinePass) -> bool:
        committed.clear()
        started, cpu = time.perf_counter(), time.process_time()
        worked = original_run(self)
        elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
        # A pass that found work commits a non-empty transaction; its return
        # value only says whether another pass is needed.
        did = any(size > 0 for size in committed)
        records.append(PassRecord(elapsed, cpu, did, sum(committed), len(committed)))
        return worked

    processing.PipelinePass.run = run  # type: ignore[method-assign]
    zk_context.Transaction.commit = commit  # type: ignore[method-assign]
    try:
        yield records
    finally:
        processing.PipelinePass.run = original_run  # type: ignore[method-assign]
        zk_context.Transaction.commit = original_commit  # type: ignore[method-assign]


@dataclass
class Run:
    """One ``process_pipeline`` call: its passes and the server's counters around it."""

    seconds: float
    passes: list[PassRecord]
    bytes_in: float
    bytes_out: float
    bytes_written: float
    writes: float


def measured_run(services: Services, env: Environment, profile: cProfile.Profile | None) -> Run:
    before = services.mntr()
    with recording() as records:
        started = time.perf_counter()
        if profile is not None:
            profile.enable()
        processing.process_pipeline(env, TENANT, PIPELINE)
        if profile is not None:
            profile.disable()
        seconds = time.perf_counter() - started
    after = services.mntr()
    return Run(
        seconds,
        records,
        # minus the 4 bytes of the ``mntr`` word itself
        after[BYTES_IN] - before[BYTES_IN] - 4,
        after.get(BYTES_OUT, 0.0) - before.get(BYTES_OUT, 0.0),
        services.written(after) - services.written(before),
        after[WRITES] - before[WRITES],
    )


def _fill(client: ZooKeeperClient, env: Environment, depth: int) -> list[Any]:
    """``depth`` items, merged, each with a running build; the builds to complete."""
    events = EventQueue(client, paths.pipeline_management_queue(TENANT, PIPELINE))
    for n in range(depth):
        change = {
            "connection": "local",
            "project": "app",
            "branch": "main",
            "ref": f"refs/changes/{n}",
            "commit": f"{n:040x}",
        }
        events.put({"type": "enqueue", "change": change})
    processing.process_pipeline(env, TENANT, PIPELINE)
    merger = JobRequestQueue(client, paths.merger_queue())
    for request in merger.pending():
        claimed = merger.claim(request.uuid, "bench")
        assert claimed is not None
        merger.complete(claimed, {"ok": True})
    processing.process_pipeline(env, TENANT, PIPELINE)
    pending = JobRequestQueue(client, paths.executor_queue()).pending()
    assert len(pending) == depth, (len(pending), depth)
    store = PipelineStore(client)
    state = store.state(TENANT, PIPELINE, store.read(TENANT, PIPELINE))
    assert len(state.items) == depth
    # Results for items from the back of the queue: they wait for the
    # items ahead, so the depth stays as it is.
    head_buildsets = {i.buildset.uuid for i in list(state.items.values())[:1]}
    return [r for r in reversed(pending) if r.buildset_uuid not in head_buildsets]


def _median(runs: list[Run], key: str) -> float:
    return statistics.median(float(getattr(r, key)) for r in runs)


def gate_depth(
    services: Services, depth: int, samples: int, profile: cProfile.Profile | None = None
) -> dict[str, Any]:
    phase = services.system(f"depth-{depth}")
    client = connect(phase.system.environment.zookeeper.settings())
    try:
        env = Environment(
            client, GateManagers(), GateFormats(), lambda task, args, queue, label="": None, []
        )
        backlog = _fill(client, env, depth)
        executor = JobRequestQueue(client, paths.executor_queue())
        working: list[Run] = []
        confirming: list[Run] = []
        for request in backlog[:samples]:
            claimed = executor.claim(request.uuid, "bench")
            assert claimed is not None
            executor.complete(claimed, {"result": "SUCCESS", "data": {}})
            run = measured_run(services, env, profile)
            worked = [p for p in run.passes if p.worked]
            assert len(worked) == 1, run.passes
            working.append(run)
            quiet = measured_run(services, env, None)
            assert not any(p.worked for p in quiet.passes), quiet.passes
            confirming.append(quiet)
    finally:
        timings.flush_all()  # the passes' samples, while the clients are open
        client.stop()
        client.close()
    passes = [next(p for p in r.passes if p.worked) for r in working]
    row: dict[str, Any] = {
        "depth": depth,
        "samples": len(working),
        "pass_ms": 1000 * statistics.median(p.seconds for p in passes),
        "pass_cpu_ms": 1000 * statistics.median(p.cpu_seconds for p in passes),
        "run_ms": 1000 * _median(working, "seconds"),
        "txn_bytes_per_pass": statistics.median(p.txn_bytes for p in passes),
        "txns_per_pass": statistics.median(p.txns for p in passes),
        "server_bytes_received_per_run": _median(working, "bytes_in"),
        "server_bytes_sent_per_run": _median(working, "bytes_out"),
        "server_writes_per_run": _median(working, "writes"),
        "server_bytes_written_per_run": _median(working, "bytes_written"),
        "confirm_pass_ms": 1000
        * statistics.median(r.passes[0].seconds for r in confirming if r.passes),
        "confirm_cpu_ms": 1000
        * statistics.median(r.passes[0].cpu_seconds for r in confirming if r.passes),
        "confirm_run_ms": 1000 * _median(confirming, "seconds"),
        "confirm_bytes_received": _median(confirming, "bytes_in"),
        "confirm_bytes_sent": _median(confirming, "bytes_out"),
        "confirm_writes": _median(confirming, "writes"),
    }
    return row


COLUMNS = [
    ("items", "depth", "{:.0f}"),
    ("pass ms", "pass_ms", "{:.1f}"),
    ("pass CPU ms", "pass_cpu_ms", "{:.1f}"),
    ("run ms", "run_ms", "{:.1f}"),
    ("txn bytes", "txn_bytes_per_pass", "{:.0f}"),
    ("ZK bytes written", "server_bytes_written_per_run", "{:.0f}"),
    ("bytes in", "server_bytes_received_per_run", "{:.0f}"),
    ("bytes read", "server_bytes_sent_per_run", "{:.0f}"),
    ("writes", "server_writes_per_run", "{:.0f}"),
    ("confirm pass ms", "confirm_pass_ms", "{:.1f}"),
    ("confirm CPU ms", "confirm_cpu_ms", "{:.1f}"),
    ("confirm run ms", "confirm_run_ms", "{:.1f}"),
    ("confirm bytes in", "confirm_bytes_received", "{:.0f}"),
    ("confirm bytes read", "confirm_bytes_sent", "{:.0f}"),
]


def _line(cells: list[str]) -> str:
    widths = [max(len(label), 7) for label, _, _ in COLUMNS]
    return "  " + " ".join(f"{c:>{w}}" for c, w in zip(cells, widths, strict=True))


def print_rows(rows: list[dict[str, Any]]) -> None:
    """The table, and the deepest row over the shallowest (issue 17: within 2x)."""
    print("\ngate depth: one build result applied per run, then a confirming run (medians)")
    print(_line([label for label, _, _ in COLUMNS]))
    for row in rows:
        print(_line([fmt.format(row[key]) for _, key, fmt in COLUMNS]))
    if len(rows) >= 2:
        low, high = rows[0], rows[-1]
        ratios = [f"x{high[k] / low[k]:.2f}" if low[k] else "-" for _, k, _ in COLUMNS[1:]]
        print(_line([f"{high['depth']}/{low['depth']}", *ratios]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--depths", type=int, nargs="+", default=[10, 100, 500])
    parser.add_argument("--samples", type=int, default=15)
    parser.add_argument("--profile", type=int, default=0, help="cProfile the runs at this depth")
    parser.add_argument("--sort", default="cumulative", help="the profile's order (pstats key)")
    args = parser.parse_args()
    rows = []
    profile = cProfile.Profile() if args.profile else None
    with tempfile.TemporaryDirectory(prefix="sluice-bench-") as tmp:
        services = Services(Path(tmp))
        try:
            services.start()
            for depth in args.depths:
                rows.append(
                    gate_depth(
                        services, depth, args.samples, profile if depth == args.profile else None
                    )
                )
                print(f"gate depth {depth}: done", flush=True)
        finally:
            services.stop()
    print_rows(rows)
    if profile is not None:
        print(f"\nprofile of the working runs at {args.profile} items ({args.sort}):")
        pstats.Stats(profile).sort_stats(args.sort).print_stats(40)


if __name__ == "__main__":
    main()
