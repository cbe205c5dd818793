"""A gate of five changes on real workers, run while a fault happens, then checked.

Every fault test (RELIABILITY.md rows 1-14) runs the same gate and checks the
same things afterwards: every item completed, every change merged exactly
once and in order, every build attempt in SQL exactly once, no ZooKeeper
request left unfinished and no lock left held.
"""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from cli.stack import process
from scheduler.stores.job_requests import JobRequestQueue
from scheduler.testhooks import HOLD_BEFORE_COMMIT
from scheduler.zk import paths
from scheduler.zk.client import ZooKeeperClient, connect
from tests.e2e.system import SluiceSystem
from tests.e2e.test_gate import CONFIG, MAIN_YAML
from tests.fixtures.waiting import wait_until
from tests.fixtures.workers import WorkerProcess

REFS = [f"c{n}" for n in range(1, 6)]
SESSION_TIMEOUT = 4.0

APP = {
    ".zuul.yaml": """
        - job:
            name: unit
            run: ci/unit.sh
        - project:
            gate:
              jobs: [unit]
        """,
    # Leaves a token under RUNNING/ while it runs, so a test can tell that a
    # build runs and count them ($$ is the job's pid in its sandbox, not on
    # the host: the host's process is found by its ``sleep 2``).
    "ci/unit.sh": """
        #!/bin/sh
        mkdir -p RUNNING
        token=$(od -An -N8 -tx8 /dev/urandom | tr -d ' ')
        echo running > "RUNNING/$token"
        sleep 2
        rm -f "RUNNING/$token"
        """,
    "src/app.py": "value = 1\n",
}


@dataclass
class GateRun:
    system: SluiceSystem
    schedulers: list[WorkerProcess] = field(default_factory=list)
    executors: list[WorkerProcess] = field(default_factory=list)
    enqueues: list[subprocess.Popen[str]] = field(default_factory=list)
    started: float = 0.0

    @property
    def running_dir(self) -> Path:
        return self.system.root / "running"

    @property
    def hold_flag(self) -> Path:
        return self.system.root / "hold"

    def prepare(self) -> None:
        system = self.system
        system.environment.session_timeout = SESSION_TIMEOUT
        system.tenant(MAIN_YAML)
        system.repos.commit("config", "main", CONFIG)
        # every build is a user of its own: the folder is open to all of them
        self.running_dir.mkdir(mode=0o777)
        self.running_dir.chmod(0o777)
        app = {**APP, "ci/unit.sh": APP["ci/unit.sh"].replace("RUNNING", str(self.running_dir))}
        base = system.repos.commit("app", "main", app)
        for n, ref in enumerate(REFS):
            system.repos.commit("app", ref, {f"src/{ref}.py": f"{n}\n"}, base=base)
        system.repos.git("app", "checkout", "-q", "--detach")
        system.base = base  # type: ignore[attr-defined]

    def start(self, *, hold_first_scheduler: bool = False, schedulers: int = 2) -> None:
        """Workers: a merger with the sweep timer, two executors, schedulers."""
        system = self.system
        fast_sweep = {"SLUICE_SWEEP_INTERVAL": "1"}
        system.start_worker(("merger", "maintenance"), env=fast_sweep, beat=True)
        for _ in range(2):
            self.executors.append(system.start_worker(("executor",), env=fast_sweep))
        hold = {HOLD_BEFORE_COMMIT: str(self.hold_flag)} if hold_first_scheduler else {}
        self.schedulers.append(system.start_worker(("scheduler",), concurrency=1, env=hold))
        for _ in range(schedulers - 1):
            self.add_scheduler()
        system.sluice("reconfigure")

    def add_scheduler(self) -> WorkerProcess:
        worker = self.system.start_worker(("scheduler",), concurrency=1)
        self.schedulers.append(worker)
        return worker

    def enqueue_all(self) -> None:
        """Enqueue every change, each ``sluice enqueue`` a process of its own."""
        self.started = time.monotonic()
        for ref in REFS:
            self.enqueues.append(
                self.system.sluice_process(
                    "enqueue",
                    "--tenant",
                    "demo",
                    "--pipeline",
                    "gate",
                    "--project",
                    "app",
                    "--branch",
                    "main",
                    "--ref",
                    ref,
                    "--timeout",
                    "150",
                )
            )

    def running_build_pid(self, timeout: float = 60) -> int:
        """The host pid of a running build's job (its ``sleep``, under an executor)."""

        def find() -> int | None:
            if not any(self.running_dir.glob("*")):
                return None
            for entry in Path("/proc").iterdir():
                if not entry.name.isdigit():
                    continue
                try:
                    if (entry / "cmdline").read_text() != "sleep\x002\x00":
                        continue
                except OSError:
                    continue
                pid = int(entry.name)
                if any(_descends_from(pid, w.pid) for w in self.executors):
                    return pid
            return None

        pid = wait_until(find, timeout, "a build to be running")
        assert pid is not None
        return pid

    def worker_of(self, pid: int) -> WorkerProcess:
        """The executor worker whose process tree holds ``pid``."""
        for worker in self.executors:
            if _descends_from(pid, worker.pid):
                return worker
        raise AssertionError(f"process {pid} belongs to no executor worker")

    def wait_enqueued(self, timeout: float = 200) -> None:
        """Every ``sluice enqueue`` answered (its item is in the pipeline)."""
        for enqueue in self.enqueues:
            _out, err = enqueue.communicate(timeout=timeout)
            assert enqueue.returncode == 0, err

    def finish(self, timeout: float = 200) -> float:
        """Wait for the enqueues and for idleness; return the run's seconds.

        On a timeout every worker's log tail is printed (pytest shows it with
        the failure), so a stall in CI can be understood afterwards.
        """
        try:
            self.wait_enqueued(timeout)
            self.system.sluice("wait", "--idle", "--timeout", str(timeout))
        except AssertionError:
            for worker in self.system.started:
                alive = "alive" if process.is_alive(worker.pid) else "DEAD"
                print(f"\n===== {worker.node} {worker.queues} ({alive}) =====")
                print(worker.log_text()[-6000:])
            raise
        return time.monotonic() - self.started

    def verify(self) -> None:
        system = self.system
        sets = system.buildsets()
        assert sorted(b["ref"] for b in sets) == REFS, "one reported buildset per change"
        assert {b["result"] for b in sets} == {"SUCCESS"}, sets
        attempts = [(b["ref"], b["job"], b["attempt"]) for b in system.builds()]
        assert len(attempts) == len(set(attempts)), "a build attempt recorded twice"
        for ref in REFS:
            final = [b for b in system.builds() if b["ref"] == ref]
            assert max(final, key=lambda b: b["attempt"])["result"] == "SUCCESS"
        base = system.base  # type: ignore[attr-defined]
        merged = system.repos.git("app", "rev-list", "--first-parent", "--count", f"{base}..main")
        assert int(merged) == len(REFS), "each change merged exactly once"
        files = system.repos.git("app", "ls-tree", "-r", "--name-only", "main").split()
        assert all(f"src/{ref}.py" in files for ref in REFS)
        self._verify_zookeeper()

    def _verify_zookeeper(self) -> None:
        client = connect(self.system.environment.zookeeper.settings())
        try:
            for root in (paths.merger_queue(), paths.executor_queue()):
                queue = JobRequestQueue(client, root)
                assert queue.active() == [], f"unfinished requests in {root}"
                assert _children(client, paths.request_child(root, "locks")) == []
            lock = paths.pipeline_lock("demo", "gate")
            assert _children(client, lock) == [], "a pipeline lock is still held"
        finally:
            client.stop()
            client.close()


def _children(client: ZooKeeperClient, path: str) -> list[str]:
    return [] if client.exists(path) is None else client.get_children(path)


def _descends_from(pid: int, ancestor: int) -> bool:
    while pid > 1:
        if pid == ancestor:
            return True
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return False
        pid = int(stat.rsplit(")", 1)[1].split()[1])
    return False
