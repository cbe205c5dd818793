"""A gate across three hosts (network namespaces) that loses one of them.

Issue 18, part 5; docs/reliability.md rows 3, 3b and 3c. Three namespaces
``h1``..``h3`` on a bridge (:mod:`tests.fixtures.hosts`), a ZooKeeper member
in each, Redis and ``git daemon`` (the forge: every fetch and the gate's push
go over ``git://``) on ``h1``, and in each host a scheduler+merger worker
(with the sweep timer) and an executor (``executor.merge_here``: it merges
again from the request ZooKeeper keeps), each host with its own state dir.
The test itself is the operator's machine on the bridge: it runs ``sluice``
and a probe client writing to ZooKeeper in a loop.

A gate of five (``tests/chaos/gate.py``) runs, and while builds run one host
is lost: every process of the host killed (``kill``), its link set down for
15 s and up again (``link``), or the ZooKeeper leader's host cut off for 20 s
(``leader``: isolated by the network, not killed). ``kill`` and ``link`` hit
a host other than ``h1`` that is running a build; ``h1`` holds the single
Redis and the git server, so it is not killed; its link is cut for 15 s
(``services-link``: Redis, the forge and a ZooKeeper member gone at once).
Afterwards ``GateRun.verify``: one report per change, each merged exactly
once, each build attempt in SQL once, nothing unfinished or locked in
ZooKeeper; a host that came back has its member in the ensemble and its
workers answering a ping. The figures are printed (``-s``) and recorded in
docs/reliability.md.

Not in the default run (``-m hosts``; ``make test-hosts``); needs root.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from cli.commands.state import status_document
from cli.stack import process
from tests.chaos.gate import REFS, GateRun
from tests.chaos.test_ensemble import WriteProbe
from tests.e2e.system import SluiceSystem, dedent
from tests.fixtures.ensemble import Ensemble, Member
from tests.fixtures.hosts import (
    REDIS_PORT,
    HostNetwork,
    HostWorkerFactory,
    NetHost,
    NetnsGitDaemon,
    NetnsRedis,
    host_ensemble,
    host_network,  # noqa: F401
    member_on,
)
from tests.fixtures.waiting import wait_until
from tests.fixtures.workers import ServiceEnvironment, WorkerProcess

pytestmark = [pytest.mark.hosts, pytest.mark.timeout(600)]

LINK_DOWN = 15.0  # seconds a host's link stays down (past the 4 s session timeout)
LEADER_ISOLATED = 20.0
SERVICES_HOST = "h1"  # Redis and git daemon


@dataclass
class HostDeployment:
    network: HostNetwork
    ensemble: Ensemble
    redis: NetnsRedis
    git: NetnsGitDaemon
    gate: GateRun
    factories: dict[str, HostWorkerFactory]
    workers: dict[str, list[WorkerProcess]] = field(default_factory=dict)

    @property
    def system(self) -> SluiceSystem:
        return self.gate.system

    def start_workers(self) -> None:
        """A scheduler+merger (with the sweep timer) and an executor in every host."""
        system = self.system
        config = {"SLUICE_CONFIG": str(system.config), "SLUICE_SWEEP_INTERVAL": "1"}
        for name, factory in self.factories.items():
            beat = ["--beat", "--schedule", str(factory.state_dir / "beat-schedule")]
            scheduler = factory.start(
                ("scheduler", "merger", "maintenance"),
                wait=False,
                extra_env=config,
                extra_args=beat,
            )
            executor = factory.start(("executor",), wait=False, extra_env=config)
            self.workers[name] = [scheduler, executor]
            self.gate.schedulers.append(scheduler)
            self.gate.executors.append(executor)
            system.started += [scheduler, executor]
        for name, factory in self.factories.items():
            for worker in self.workers[name]:
                factory.wait_ready(worker, timeout=120)
        system.sluice("reconfigure")

    def stop(self) -> None:
        for factory in self.factories.values():
            factory.stop_all()
        self.git.stop()
        self.redis.stop()
        self.ensemble.stop_all()

    def building_host(self, timeout: float = 90) -> NetHost:
        """A host other than ``h1`` whose executor runs a job right now."""

        def find() -> NetHost | None:
            for host in self.network.hosts:
                if host.name != SERVICES_HOST and any(_is_job(pid) for pid in host.pids()):
                    return host
            return None

        host = wait_until(find, timeout, "a build to run on h2 or h3", interval=0.1)
        assert host is not None
        return host

    def host_of_member(self, member: Member) -> NetHost:
        return next(h for h in self.network.hosts if h.address == member.server.host)


def _is_job(pid: int) -> bool:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return any(arg.endswith(b"unit.sh") for arg in argv)


@pytest.fixture
def deployment(
    host_network: HostNetwork,  # noqa: F811
    tmp_path: Path,
) -> Iterator[HostDeployment]:
    network = host_network
    services = network.host(SERVICES_HOST)
    ensemble = host_ensemble(network, tmp_path / "ensemble")
    redis = NetnsRedis(
        data_dir=tmp_path / "redis", port=REDIS_PORT, host=services.address, netns=services.netns
    )
    git = NetnsGitDaemon(services, tmp_path / "repos", tmp_path / "git-daemon.log")
    state_dir = tmp_path / "state"  # the operator's: logs and the SQL database
    state_dir.mkdir()
    factories: dict[str, HostWorkerFactory] = {}
    deployed: HostDeployment | None = None
    try:
        ensemble.start_all()
        redis.start()
        redis.wait_ready()
        environment = ServiceEnvironment(
            zookeeper=ensemble.target(), redis_url=redis.url, state_dir=state_dir
        )
        for host in network.hosts:
            state = tmp_path / "hosts" / host.name / "state"
            factories[host.name] = HostWorkerFactory(environment, host, state)
        system = SluiceSystem(environment, factories[SERVICES_HOST], tmp_path)
        gate = GateRun(system)
        gate.prepare()
        git.start()
        system.config.write_text(
            dedent(
                f"""
                tenant_config: main.yaml
                connections:
                  local:
                    driver: git
                    baseurl: {git.url}
                executor:
                  merge_here: true
                """
            )
        )
        deployed = HostDeployment(network, ensemble, redis, git, gate, factories)
        yield deployed
    finally:
        if deployed is not None:
            deployed.stop()
        else:
            for factory in factories.values():
                factory.stop_all()
            git.stop()
            redis.stop()
            ensemble.stop_all()


@pytest.fixture
def probe(deployment: HostDeployment) -> Iterator[WriteProbe]:
    target = deployment.system.environment.zookeeper
    writer = WriteProbe(target)  # type: ignore[arg-type]
    yield writer
    writer.stop()


def _all_in_the_gate(probe: WriteProbe) -> None:
    assert probe.client is not None
    client = probe.client
    seen: set[str] = set()

    def all_in() -> bool:
        text = json.dumps(status_document(client, "demo"))
        seen.update(re.findall(r'"ref": "(c\d+)"', text))
        return seen >= set(REFS)

    wait_until(all_in, 120, "every change to be in the gate", interval=0.2)


def _finish(gate: GateRun) -> int:
    """Wait for every ``sluice enqueue`` and for idleness; how many enqueues gave up.

    ``sluice enqueue`` may give up waiting for its answer on a connection loss
    (exit 1, naming ZooKeeper); whether its change went in is what
    ``GateRun.verify`` checks.
    """
    gave_up = 0
    for enqueue in gate.enqueues:
        _out, err = enqueue.communicate(timeout=300)
        if enqueue.returncode != 0:
            assert "ZooKeeper" in err, err
            gave_up += 1
    gate.enqueues.clear()
    gate.finish(timeout=300)
    return gave_up


def _retried(gate: GateRun) -> int:
    return sum(1 for build in gate.system.builds() if build["attempt"] > 1)


def _reported_within(gate: GateRun, deadline: float) -> float | None:
    """When every change had its report (SQL), if that happened before ``deadline``."""
    while time.monotonic() < deadline:
        if len(gate.system.buildsets()) == len(REFS):
            return time.monotonic()
        time.sleep(0.5)
    return None


def _builds_in(executor: WorkerProcess) -> int:
    """Builds an executor ran (each merged again there first)."""
    return executor.log_text().count("merged again here")


def _lost_sessions(gate: GateRun) -> int:
    return sum(w.log_text().count("ZooKeeper session lost") for w in gate.system.started)


def _move_leader_off(deployment: HostDeployment, host: NetHost) -> None:
    """Restart ``host``'s member while it leads, so another member leads."""
    ensemble = deployment.ensemble
    member = member_on(ensemble, host)
    while ensemble.leader() is member:
        ensemble.stop(member)
        ensemble.start(member)
        ensemble.wait_formed()


@pytest.mark.parametrize("fault", ["kill", "link", "leader", "services-link"])
def test_a_gate_across_three_hosts_survives_losing_one(
    fault: str, deployment: HostDeployment, probe: WriteProbe
) -> None:
    ensemble = deployment.ensemble
    gate = deployment.gate
    if fault == "leader":  # h1 holds Redis: isolating it would be a Redis fault too
        _move_leader_off(deployment, deployment.network.host(SERVICES_HOST))
    deployment.start_workers()
    probe.start()
    gate.enqueue_all()
    _all_in_the_gate(probe)
    if fault == "leader":
        leader = ensemble.leader()
        host = deployment.host_of_member(leader)
        assert host.name != SERVICES_HOST
    elif fault == "services-link":  # Redis and the git server cut off with the host
        deployment.building_host()
        host = deployment.network.host(SERVICES_HOST)
    else:
        host = deployment.building_host()
    member = member_on(ensemble, host)
    role = member.mode()
    faulted = time.monotonic()
    healed = faulted
    notes: list[str] = []
    if fault == "kill":
        killed = host.kill_all()
        member.server.proc_pid = None
        first_write = probe.first_write_after(faulted)
        notes.append(f"{len(killed)} processes killed")  # its ZooKeeper member among them
    else:
        host.link_down()
        faulted = time.monotonic()  # the link is down once ``ip`` returned
        first_write = probe.first_write_after(faulted)
        if fault == "leader":
            new_leader = wait_until(
                lambda: next((m for m in ensemble.members if m.mode() == "leader"), None),
                60,
                "the two others to elect a leader",
                interval=0.1,
            )
            assert new_leader is not None and new_leader is not member
            notes.append(f"new leader zk{new_leader.myid} {time.monotonic() - faulted:.2f}s after")
        outage = LEADER_ISOLATED if fault == "leader" else LINK_DOWN
        reported = _reported_within(gate, faulted + outage)
        time.sleep(max(0.0, faulted + outage - time.monotonic()))
        host.link_up()
        healed = time.monotonic()
        notes.append(
            "every change reported "
            + (f"{reported - faulted:.1f}s after the fault" if reported else "after the outage")
        )
    gave_up = _finish(gate)
    idle = time.monotonic() - (faulted if fault == "kill" else healed)
    gate.verify()
    if fault != "kill":  # the host is back: its ZooKeeper member in the ensemble
        rejoined = ensemble.wait_formed(timeout=120)
        notes.append(f"ensemble whole {time.monotonic() - healed:.1f}s after the link came up")
        if fault == "leader":
            assert member.mode() == "follower", "the isolated leader rejoined as a follower"
            assert rejoined is not member
    retried = _retried(gate)
    spread = {name: _builds_in(workers[1]) for name, workers in deployment.workers.items()}
    print(
        f"\nhosts, {fault} of {host.name} (zk{member.myid}, {role}): first ZooKeeper write "
        f"{first_write:.2f}s after the fault, idle {idle:.1f}s after the "
        f"{'fault' if fault == 'kill' else 'link came up'}; {'; '.join(notes)}; "
        f"builds retried: {retried}; worker sessions lost: {_lost_sessions(gate)}; "
        f"enqueue CLIs that gave up: {gave_up}; builds per host's executor: {spread}"
    )
    if fault != "kill":  # the host's workers are back: they answer a ping again
        factory = deployment.factories[host.name]
        for worker in deployment.workers[host.name]:
            assert process.is_alive(worker.pid), f"{worker.node} died"
            factory.wait_ready(worker, timeout=60)
