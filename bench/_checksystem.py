"""The benchmarks' check system: a tenant whose check and gate run M no-op jobs
per change, N changes ready to enqueue, and the workers of the local stack.

Used by bench/throughput.py and bench/latency.py.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from _system import Phase, Services
from gate_depth import TENANT

from cli.stack.workers import EXECUTOR_CONCURRENCY
from scheduler.model.change import Change
from scheduler.nudge import dispatch, task_names
from scheduler.settings.load import load_settings
from scheduler.stores.management import wait_for_result
from scheduler.zk import paths
from scheduler.zk.client import connect
from scheduler.zk.event_queue import EventQueue
from tests.fixtures.waiting import wait_until

MAIN_YAML = """
- tenant:
    name: bench
    source:
      local:
        config-projects:
          - config
        untrusted-projects:
          - app
"""

# the gate's success action when it merges (--gate-merges): each item pushed, as tested
GATE_MERGES = """
            success:
              local:
                merge: true"""

PIPELINES = {
    "zuul.d/pipelines.yaml": """
        - pipeline:
            name: check
            manager: independent
            trigger:
              local:
                - event: ref-updated
                  ref: ^refs/heads/never$
        - pipeline:
            name: gate
            manager: dependent
            trigger:
              local:
                - event: ref-updated
                  ref: ^refs/heads/never${gate_success}
        - job:
            name: base
            parent: null
            timeout: 120
        """,
}


def config(*, gate_merges: bool = False) -> dict[str, str]:
    """The config project's files: the gate merges each item or reports only."""
    success = GATE_MERGES if gate_merges else ""
    return {name: text.replace("{gate_success}", success) for name, text in PIPELINES.items()}


def app_files(jobs: int, script: str) -> dict[str, str]:
    names = [f"noop{j}" for j in range(jobs)]
    stanzas = "".join(
        f"""
        - job:
            name: {name}
            run: ci/job.sh
        """
        for name in names
    )
    project = f"""
        - project:
            check:
              jobs: [{", ".join(names)}]
            gate:
              jobs: [{", ".join(names)}]
        """
    return {".zuul.yaml": stanzas + project, "ci/job.sh": script, "src/app.py": "x = 0\n"}


NOOP = """
    #!/bin/sh
    exec true
    """


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    rank = q * (len(ordered) - 1)
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


@dataclass
class CheckSystem:
    """A check pipeline over ``app`` with ``refs`` ready to enqueue, workers up."""

    phase: Phase
    refs: list[str]

    @property
    def client_settings(self) -> Any:
        return load_settings()

    def enqueue(
        self, refs: list[str], timeout: float = 120, pipeline: str = "check"
    ) -> dict[str, float]:
        """Put one enqueue event per ref, nudge once, wait for every outcome.

        Returns when each event was put (time.time()).
        """
        system = self.phase.system
        conf = load_settings()
        client = connect(conf.zookeeper)
        sent: dict[str, float] = {}
        try:
            queue = EventQueue(client, paths.tenant_management_queue(TENANT))
            ids = []
            for ref in refs:
                commit = system.repos.git("app", "rev-parse", ref)
                change = Change("local", "app", "main", ref, commit)
                result_id = uuid.uuid4().hex
                sent[ref] = time.time()
                queue.put(
                    {
                        "type": "enqueue",
                        "change": change.to_dict(),
                        "pipeline": pipeline,
                        "result_id": result_id,
                    }
                )
                ids.append(result_id)
            dispatch.send(task_names.PROCESS_TENANT, TENANT, settings=conf)
            for result_id in ids:
                outcome = wait_for_result(client, result_id, timeout)
                assert outcome is not None and "item" in outcome, outcome
        finally:
            client.stop()
            client.close()
        return sent

    def wait_reported(self, refs: list[str], timeout: float = 300) -> None:
        """Until every ref has a reported buildset (polls SQL with one count, not ZooKeeper)."""

        def done() -> bool:
            return self.phase.reported(refs) == len(set(refs))

        wait_until(done, timeout, f"{len(refs)} buildsets reported", interval=0.1)


def check_system(
    services: Services,
    tag: str,
    changes: int,
    jobs: int,
    *,
    script: str = NOOP,
    session_timeout: float = 10.0,
    as_branches: bool = False,
    gate_merges: bool = False,
) -> CheckSystem:
    """A check pipeline over ``app`` with ``changes`` changes ready to enqueue.

    Each change is a commit on ``main``'s tip under ``refs/changes/<n>``, as
    a forge keeps changes (Zuul's harness too); ``as_branches`` makes each
    a branch ``c<n>`` of the project instead, as the benchmarks did until
    session 14 (every branch then holds config, and every merge's state
    lists every branch). ``gate_merges``: the gate pushes each item it
    passes to ``main`` (``merge: true``), as a gate that merges does.
    """
    phase = services.system(tag, session_timeout=session_timeout)
    phase.use_environment()
    system = phase.system
    system.tenant(MAIN_YAML)
    system.repos.commit("config", "main", config(gate_merges=gate_merges))
    base = system.repos.commit("app", "main", app_files(jobs, script))
    branches = [f"c{n}" for n in range(changes)]
    for branch in branches:
        system.repos.commit("app", branch, {f"src/{branch}.py": f"{branch} = 1\n"}, base=base)
    system.repos.git("app", "checkout", "-q", "--detach")
    if not as_branches:
        # as a forge keeps them: a ref per change, not a branch of the project
        for n, branch in enumerate(branches):
            system.repos.git("app", "update-ref", f"refs/changes/{n}", f"refs/heads/{branch}")
            system.repos.git("app", "update-ref", "-d", f"refs/heads/{branch}")
    refs = branches if as_branches else [f"refs/changes/{n}" for n in range(changes)]
    return CheckSystem(phase, refs)


@dataclass(frozen=True)
class WorkerSetup:
    """How the benchmark's workers run: the local stack's defaults unless asked otherwise."""

    scheduler_pool: str = "prefork"
    # processes (threads with the threads pool) of each executor worker
    # (sluice stack up --executor-concurrency)
    executor_concurrency: int = EXECUTOR_CONCURRENCY
    executor_pool: str = "prefork"
    # more environment for every worker (SLUICE_BUILD_DIR: executor.build_dir)
    env: Mapping[str, str] = field(default_factory=dict)
    # executor.sandbox: ``none`` measures what a build costs without one
    sandbox: str = "bwrap"


def start_workers(
    check: CheckSystem,
    setup: WorkerSetup | None = None,
    *,
    executors: int = 1,
    sweep: str = "",
) -> None:
    """A scheduler worker, a merger (with the sweep timer), ``executors`` executors."""
    setup = setup or WorkerSetup()
    system = check.phase.system
    if setup.sandbox != "bwrap":
        with system.config.open("a") as config:
            config.write(f"executor:\n  sandbox: {setup.sandbox}\n")
    env = {**setup.env, **({"SLUICE_SWEEP_INTERVAL": sweep} if sweep else {})}
    system.start_worker(("scheduler",), concurrency=1, env=env, pool=setup.scheduler_pool)
    system.start_worker(("merger", "maintenance"), concurrency=1, env=env, beat=bool(sweep))
    for _ in range(executors):
        system.start_worker(
            ("executor",),
            concurrency=setup.executor_concurrency,
            env=env,
            pool=setup.executor_pool,
        )
    system.sluice("reconfigure")
