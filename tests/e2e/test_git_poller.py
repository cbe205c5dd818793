"""The git driver's poller on real workers: pushes trigger pipelines, nothing is lost.

Maintenance workers poll the connection's repositories (``poll_delay: 1``,
four partitions shared among them, seed 002). A push to ``main`` runs the
``post`` pipeline, a ``review/...`` branch runs ``check``, a tag runs
``tag``. Killing the worker that owns the partitions mid-polling loses no
ref update and doubles none: its successor continues from the stored offset.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from typing import Any

import pytest

from scheduler.drivers.git.poller import partition_of
from scheduler.zk import paths
from scheduler.zk.client import ZooKeeperClient, connect
from tests.e2e.system import TENANT_YAML, SluiceSystem
from tests.fixtures.waiting import wait_until

PARTITIONS = 4
CONFIG = {
    "zuul.d/pipelines.yaml": """
        - pipeline:
            name: check
            manager: independent
            trigger:
              local:
                - event: ref-updated
                  ref: ^refs/heads/review/.*$
        - pipeline:
            name: post
            manager: independent
            trigger:
              local:
                - event: ref-updated
                  ref: ^refs/heads/main$
        - pipeline:
            name: tag
            manager: independent
            trigger:
              local:
                - event: ref-updated
                  ref: ^refs/tags/.*$
        - job:
            name: base
            parent: null
            timeout: 60
        """,
}
APP = {
    ".zuul.yaml": """
        - job:
            name: hello
            run: ci/hello.sh
        - project:
            check: {jobs: [hello]}
            post: {jobs: [hello]}
            tag: {jobs: [hello]}
        """,
    "ci/hello.sh": "#!/bin/sh\necho hello\n",
}


@pytest.fixture
def polled(system: SluiceSystem) -> Iterator[SluiceSystem]:
    text = system.config.read_text()
    system.config.write_text(
        text.replace(
            "    baseurl: repos\n",
            f"    baseurl: repos\n    poll_delay: 1\n    poll_partitions: {PARTITIONS}\n",
        )
    )
    system.tenant(TENANT_YAML)
    system.repos.commit("config", "main", CONFIG)
    system.repos.commit("app", "main", APP)
    system.repos.git("app", "checkout", "-q", "--detach")
    yield system


def zk(system: SluiceSystem) -> ZooKeeperClient:
    return connect(system.environment.zookeeper.settings())


def offsets(client: ZooKeeperClient) -> dict[int, dict[str, Any]]:
    found = {}
    for partition in range(PARTITIONS):
        path = paths.poller_partition_offset("local", partition)
        if client.exists(path):
            raw, _ = client.get(path)
            found[partition] = json.loads(raw)["projects"]
    return found


def polled_once(client: ZooKeeperClient) -> bool:
    seen = {p for found in offsets(client).values() for p in found}
    return {"app", "config"} <= seen


def pipelines_run(system: SluiceSystem) -> list[tuple[str, str]]:
    return sorted((b["pipeline"], b["ref"]) for b in system.buildsets())


def test_pushes_and_tags_trigger_their_pipelines(polled: SluiceSystem) -> None:
    system = polled
    system.start_worker(("scheduler", "merger", "executor"), concurrency=2)
    system.start_worker(("maintenance",), concurrency=1)
    system.sluice("reconfigure")
    client = zk(system)
    try:
        wait_until(lambda: polled_once(client), 60, "a first poll (offsets, no events)")
        assert system.buildsets() == []  # starting to poll triggers nothing

        base = system.repos.git("app", "rev-parse", "main")
        system.repos.commit("app", "review/one", {"one.txt": "1\n"}, base=base)
        system.repos.commit("app", "main", {"two.txt": "2\n"}, base=base)
        system.repos.git("app", "tag", "v1.0")
        system.repos.git("app", "checkout", "-q", "--detach")

        def all_ran() -> bool:
            system.sluice("wait", "--idle", "--timeout", "30")
            return len(system.buildsets()) >= 3

        wait_until(all_ran, 90, "check, post and tag to run", interval=1)
        runs = pipelines_run(system)
        assert ("check", "refs/heads/review/one") in runs or ("check", "review/one") in runs, runs
        assert any(p == "post" for p, _ in runs), runs
        assert any(p == "tag" and "v1.0" in r for p, r in runs), runs
        assert all(b["result"] == "SUCCESS" for b in system.buildsets())
    finally:
        client.stop()
        client.close()


def test_a_killed_poller_loses_no_update_and_doubles_none(polled: SluiceSystem) -> None:
    system = polled
    system.start_worker(("scheduler", "merger", "executor"), concurrency=2)
    first = system.start_worker(("maintenance",), concurrency=1)
    system.sluice("reconfigure")
    client = zk(system)
    try:
        wait_until(lambda: polled_once(client), 60, "a first poll")
        second = system.start_worker(("maintenance",), concurrency=1)
        app = partition_of("app", PARTITIONS)

        def owner_members() -> dict[str, list[int]]:
            root = paths.poller_members("local")
            found = {}
            for name in client.get_children(root):
                raw, _ = client.get(paths.join(root, name))
                found[name] = json.loads(raw)["partitions"]
            return found

        def shared() -> bool:  # both members hold partitions: rebalanced
            members = owner_members()
            return len(members) == 2 and all(members.values())

        wait_until(shared, 60, "the partitions shared by two pollers", interval=0.5)
        owner = next(n for n, held in owner_members().items() if app in held)
        victim = first if owner.endswith(f"-{first.pid}") else second
        assert owner.endswith(f"-{victim.pid}"), (owner, first.pid, second.pid)

        # a burst of pushes, and the owner of app's partition dies among them
        base = system.repos.git("app", "rev-parse", "main")
        for n in range(6):
            system.repos.commit("app", f"review/c{n}", {f"c{n}.txt": f"{n}\n"}, base=base)
            if n == 2:
                os.kill(victim.pid, signal.SIGKILL)
        system.repos.git("app", "checkout", "-q", "--detach")

        def all_ran() -> bool:
            system.sluice("wait", "--idle", "--timeout", "30")
            return len(system.buildsets()) >= 6

        wait_until(all_ran, 120, "every pushed branch checked", interval=1)
        refs = [r for p, r in pipelines_run(system) if p == "check"]
        assert len(refs) == 6, refs  # each once: none lost, none doubled
        assert len(set(refs)) == 6, refs
    finally:
        client.stop()
        client.close()
