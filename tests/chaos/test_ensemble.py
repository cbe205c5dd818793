"""A gate of five on a three-node ZooKeeper ensemble while its members fail.

RELIABILITY.md rows 1, 2 and 4 (issue 9, item 5). The system runs against a
local ensemble (:mod:`tests.fixtures.ensemble`): this module overrides
``test_environment`` so ``SluiceSystem`` and ``GateRun`` connect to all three
members. A :class:`WriteProbe` client writes one node in a loop, so the
figures are measured from the fault to the first write that succeeds again.

In CI: the leader stopped (SIGTERM) and killed (SIGKILL) mid-run. By hand
(``pytest -m chaos tests/chaos/test_ensemble.py -s``): the leader paused
30 s, and the quorum lost and restored. The figures are in docs/reliability.md.
"""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from cli.commands.state import status_document
from scheduler.zk.client import ConnectionState, ZooKeeperClient, connect
from tests.chaos.gate import REFS, SESSION_TIMEOUT, GateRun
from tests.fixtures.ensemble import (  # noqa: F401
    Ensemble,
    EnsembleTarget,
    ensemble_zookeeper,
    zookeeper_ensemble,
)
from tests.fixtures.waiting import wait_until
from tests.fixtures.workers import ServiceEnvironment

pytestmark = pytest.mark.timeout(400)

PROBE_NODE = "/probe"
# The probe's deadline per call (the workers' deadline is their session timeout).
PROBE_CALL_TIMEOUT = 2.0
PROBE_INTERVAL = 0.02


@pytest.fixture
def test_environment(
    ensemble_zookeeper: EnsembleTarget,  # noqa: F811
    redis_url: str,
    state_dir: Path,
) -> ServiceEnvironment:
    """The system's services, with ZooKeeper the three-node ensemble."""
    return ServiceEnvironment(
        zookeeper=ensemble_zookeeper, redis_url=redis_url, state_dir=state_dir
    )


@dataclass
class Call:
    start: float
    end: float
    ok: bool


@dataclass
class WriteProbe:
    """A client of its own setting one node in a loop; every call's start, end and outcome."""

    target: EnsembleTarget
    calls: list[Call] = field(default_factory=list)
    client: ZooKeeperClient | None = None
    session_id: int | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        settings = self.target.settings(
            session_timeout=SESSION_TIMEOUT, call_timeout=PROBE_CALL_TIMEOUT
        )
        self.client = connect(settings)
        self.client.ensure_path(PROBE_NODE)
        self.session_id = self.client.session_id
        self._thread = threading.Thread(target=self._run, name="write-probe", daemon=True)
        self._thread.start()
        wait_until(lambda: any(c.ok for c in self.calls), 10, "the probe's first write")

    def _run(self) -> None:
        assert self.client is not None
        n = 0
        while not self._stop.is_set():
            n += 1
            start = time.monotonic()
            ok = True
            try:
                self.client.set(PROBE_NODE, str(n).encode())
            except Exception:
                ok = False
            self.calls.append(Call(start, time.monotonic(), ok))
            self._stop.wait(PROBE_INTERVAL)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=PROBE_CALL_TIMEOUT + 5)
        if self.client is not None:
            with contextlib.suppress(Exception):
                self.client.stop()
                self.client.close()

    def first_write_after(self, since: float, timeout: float = 60) -> float:
        """Seconds from ``since`` to the end of the first write begun after it that succeeded."""

        def find() -> float | None:
            done = [c.end for c in list(self.calls) if c.ok and c.start >= since]
            return min(done) - since if done else None

        seconds = wait_until(find, timeout, "a probe write to succeed after the fault")
        assert seconds is not None
        return seconds

    def unavailable(self, since: float) -> float:
        """Longest gap between two successful writes ending after ``since`` (seconds)."""
        ends = [c.end for c in list(self.calls) if c.ok]
        last_before = max((e for e in ends if e < since), default=since)
        after = [e for e in ends if e >= since]
        gaps = [b - a for a, b in zip([last_before, *after], after, strict=False)]
        return max(gaps, default=0.0)

    def longest_call(self, since: float) -> float:
        return max((c.end - c.start for c in list(self.calls) if c.start >= since), default=0.0)

    def session_kept(self) -> bool:
        assert self.client is not None
        return (
            self.client.session_generation == 0
            and self.client.session_id == self.session_id
            and self.client.state == ConnectionState.CONNECTED
        )


@pytest.fixture
def probe(ensemble_zookeeper: EnsembleTarget) -> Iterator[WriteProbe]:  # noqa: F811
    writer = WriteProbe(ensemble_zookeeper)
    yield writer
    writer.stop()


def _lost_sessions(gate_run: GateRun) -> int:
    """How many times a worker logged that its ZooKeeper session was lost."""
    return sum(w.log_text().count("ZooKeeper session lost") for w in gate_run.system.started)


def _all_enqueued(gate_run: GateRun, probe: WriteProbe) -> None:
    """Wait until every change is in the gate, so no fault can keep an event out."""
    assert probe.client is not None
    client = probe.client
    seen: set[str] = set()

    def all_in() -> bool:
        text = json.dumps(status_document(client, "demo"))
        seen.update(re.findall(r'"ref": "(c\d+)"', text))
        return seen >= set(REFS)

    wait_until(all_in, 90, "every change to be in the gate", interval=0.1)


@dataclass
class JobWatcher:
    """When each job process was first seen running (``running/<pid>``, polled)."""

    running_dir: Path
    first_seen: dict[str, float] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="job-watcher", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            for entry in self.running_dir.glob("*"):
                with contextlib.suppress(ValueError):
                    self.first_seen.setdefault(entry.name, time.monotonic())

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def started_between(self, start: float, end: float) -> list[str]:
        return [job for job, seen in self.first_seen.items() if start <= seen < end]


def _finish(gate_run: GateRun) -> int:
    """``GateRun.finish``, except that a ``sluice enqueue`` may give up waiting.

    ``sluice enqueue`` waits for its answer through ZooKeeper and exits 1 on a
    connection loss (a finding, see docs/reliability.md); whether its change
    went in is what ``GateRun.verify`` checks. Returns how many gave up.
    """
    gave_up = 0
    for process in gate_run.enqueues:
        _out, err = process.communicate(timeout=200)
        if process.returncode != 0:
            assert "ZooKeeper" in err, err
            print(f"\nsluice enqueue gave up: {err.strip().splitlines()[-1]}")
            gave_up += 1
    gate_run.enqueues.clear()
    gate_run.finish()
    return gave_up


def _verify(gate_run: GateRun) -> None:
    gate_run.verify()


def _no_server_left(ensemble: Ensemble) -> bool:
    """``pgrep`` finds no process whose command line names the ensemble's dir."""
    found = subprocess.run(
        ["pgrep", "-f", str(ensemble.root)], capture_output=True, text=True, check=False
    )
    return found.returncode == 1 and not found.stdout.strip()


def test_the_ensemble_fixture_forms_and_leaves_nothing_running(
    tmp_path: Path,
) -> None:
    ensemble = Ensemble.create(tmp_path / "ensemble")
    try:
        ensemble.start_all()
        leader = ensemble.leader()
        assert len(ensemble.followers()) == 2
        assert ensemble.hosts.count(",") == 2
        ensemble.kill(leader)
        assert leader.pid is None
        new_leader = ensemble.leader()
        assert new_leader is not leader
        ensemble.start(leader)
        assert ensemble.wait_formed() is new_leader
        assert leader.mode() == "follower"
    finally:
        ensemble.stop_all()
    wait_until(lambda: _no_server_left(ensemble), 15, "pgrep to find no ensemble server")


@pytest.mark.parametrize("fault", ["stop", "kill -9"])
def test_a_gate_survives_losing_the_ensemble_leader(
    fault: str,
    gate_run: GateRun,
    zookeeper_ensemble: Ensemble,  # noqa: F811
    probe: WriteProbe,
) -> None:
    gate_run.start()
    probe.start()
    gate_run.enqueue_all()
    _all_enqueued(gate_run, probe)
    gate_run.running_build_pid()
    leader = zookeeper_ensemble.leader()
    faulted = time.monotonic()
    if fault == "stop":
        zookeeper_ensemble.stop(leader)
    else:
        zookeeper_ensemble.kill(leader)
    first_write = probe.first_write_after(faulted)
    new_leader = zookeeper_ensemble.leader()
    assert new_leader is not leader
    gave_up = _finish(gate_run)
    idle = time.monotonic() - faulted
    _verify(gate_run)
    assert probe.session_kept(), "the probe's session survived the election"
    lost = _lost_sessions(gate_run)
    print(
        f"\nensemble leader {fault}: first write {first_write:.2f}s after the fault, "
        f"idle after {idle:.1f}s; worker sessions lost: {lost}; "
        f"enqueue CLIs that gave up: {gave_up}"
    )
    assert lost == 0, "a worker's session expired during the election"


@pytest.mark.chaos
def test_a_gate_survives_the_leader_paused_30_seconds(
    gate_run: GateRun,
    zookeeper_ensemble: Ensemble,  # noqa: F811
    probe: WriteProbe,
) -> None:
    gate_run.start()
    probe.start()
    gate_run.enqueue_all()
    _all_enqueued(gate_run, probe)
    gate_run.running_build_pid()
    leader = zookeeper_ensemble.leader()
    paused = time.monotonic()
    zookeeper_ensemble.pause(leader)
    first_write = probe.first_write_after(paused)
    # Two members of three are a quorum: the gate completes during the pause.
    wait_until(
        lambda: len(gate_run.system.buildsets()) == len(REFS),
        28,
        "every change reported while the leader is paused",
        interval=0.2,
    )
    completed = time.monotonic() - paused
    time.sleep(max(0.0, paused + 30 - time.monotonic()))  # the fault: a 30 s pause
    zookeeper_ensemble.resume(leader)
    resumed = time.monotonic()
    gave_up = _finish(gate_run)
    idle = time.monotonic() - paused
    zookeeper_ensemble.wait_formed()
    _verify(gate_run)
    unavailable = probe.unavailable(paused)
    print(
        f"\nensemble leader paused 30 s: first write {first_write:.2f}s after the pause, "
        f"longest gap between writes {unavailable:.2f}s (after resume: "
        f"{probe.unavailable(resumed):.2f}s), every change reported {completed:.1f}s "
        f"after the pause (leader still paused), idle {idle:.1f}s after the pause; "
        f"worker sessions lost: {_lost_sessions(gate_run)}; enqueue CLIs that gave up: {gave_up}"
    )


@pytest.mark.chaos
def test_a_gate_waits_out_a_lost_quorum(
    gate_run: GateRun,
    zookeeper_ensemble: Ensemble,  # noqa: F811
    probe: WriteProbe,
) -> None:
    gate_run.start()
    probe.start()
    gate_run.enqueue_all()
    _all_enqueued(gate_run, probe)
    gate_run.running_build_pid()
    leader = zookeeper_ensemble.leader()
    others = [m for m in zookeeper_ensemble.members if m is not leader]
    jobs = JobWatcher(gate_run.running_dir)
    jobs.start()
    lost = time.monotonic()
    zookeeper_ensemble.stop(leader)
    zookeeper_ensemble.stop(others[0])
    time.sleep(15)  # the fault itself: no quorum for 15 s, past every session timeout
    no_quorum_calls = [c for c in probe.calls if c.start >= lost + 1]
    assert no_quorum_calls, "the probe kept calling without a quorum"
    assert not any(c.ok for c in no_quorum_calls), "a write succeeded without a quorum"
    longest = probe.longest_call(lost)
    zookeeper_ensemble.start(others[0], wait=False)
    zookeeper_ensemble.start(leader, wait=False)
    restored = time.monotonic()
    first_write = probe.first_write_after(restored)
    gave_up = _finish(gate_run)
    idle = time.monotonic() - restored
    zookeeper_ensemble.wait_formed()
    _verify(gate_run)
    jobs.stop()
    # A job already running when the quorum went may finish; none may start
    # without a quorum (a claim is a ZooKeeper write). One second of grace for
    # a job whose claim was committed just before the loss.
    started = jobs.started_between(lost + 1, restored)
    print(
        f"\nquorum lost 15 s: longest blocked probe call {longest:.2f}s "
        f"(deadline {PROBE_CALL_TIMEOUT}s), first write {first_write:.2f}s after restoring, "
        f"idle {idle:.1f}s after restoring; builds started without quorum: {len(started)}; "
        f"worker sessions lost: {_lost_sessions(gate_run)}; enqueue CLIs that gave up: {gave_up}"
    )
    assert longest <= PROBE_CALL_TIMEOUT + 0.5, "a call outlived its deadline"
    assert started == [], started
