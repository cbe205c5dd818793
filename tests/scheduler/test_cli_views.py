"""``sluice status``, ``wait --idle``, ``builds`` and ``buildsets`` over real ZooKeeper and SQL."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from cli.main import cli
from scheduler.processing.reporters import HistoryReporter
from scheduler.reporting import LogReporter, ReporterSet, SqlReporter, open_database
from scheduler.zk.client import connect
from tests.fixtures.services import ZooKeeperTarget
from tests.scheduler.world import World


@pytest.fixture
def env(zookeeper: ZooKeeperTarget, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    url = f"sqlite:///{tmp_path / 'sluice.db'}"
    monkeypatch.delenv("SLUICE_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)
    for key, value in {
        "SLUICE_ZK_HOSTS": zookeeper.hosts,
        "SLUICE_ZK_ROOT": zookeeper.root,
        "SLUICE_DATABASE_URL": url,
        "SLUICE_STATE_DIR": str(tmp_path),
    }.items():
        monkeypatch.setenv(key, value)
    return url


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    return result.exit_code, result.output


def test_status_wait_and_history(zookeeper: ZooKeeperTarget, env: str) -> None:
    client = connect(zookeeper.settings())
    engine = open_database(env)
    world = World(client, [HistoryReporter(ReporterSet([SqlReporter(engine), LogReporter()]))])
    try:
        world.enqueue("feature")
        world.process()
        world.run(world.merger, {"ok": True})
        world.process()

        code, out = run("status", "--json")
        assert code == 0
        (tenant,) = json.loads(out)["tenants"]
        (item,) = tenant["pipelines"][0]["queues"][0]["items"]
        assert [(j["name"], j["state"]) for j in item["jobs"]] == [
            ("lint", "queued"),
            ("unit", "waiting"),
        ]
        code, text = run("status")
        assert "lint" in text and "queued" in text

        code, out = run("wait", "--idle", "--timeout", "0.5")
        assert code == 1  # an item and a build request are pending

        world.run(world.executor, {"result": "SUCCESS", "data": {}})
        world.process()
        world.run(world.executor, {"result": "FAILURE", "data": {}})
        world.process()
        code, out = run("wait", "--idle", "--timeout", "10")
        assert (code, out.strip()) == (0, "idle")
    finally:
        client.stop()
        client.close()

    code, out = run("builds", "--json")
    rows = json.loads(out)
    assert sorted((r["job"], r["result"], r["attempt"]) for r in rows) == [
        ("lint", "SUCCESS", 1),
        ("unit", "FAILURE", 1),
    ]
    required = {
        "uuid",
        "job",
        "project",
        "branch",
        "ref",
        "pipeline",
        "result",
        "voting",
        "buildset",
        "start_time",
        "end_time",
        "attempt",
    }
    assert all(required <= set(row) for row in rows)
    code, out = run("buildsets", "--json")
    (buildset,) = json.loads(out)
    assert buildset["result"] == "FAILURE"
    assert {"uuid", "pipeline", "project", "ref", "result", "message"} <= set(buildset)
