"""A tenant that leaves the tenant file retires; a broken or unreadable file retires nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from scheduler.layouts import TenantLayouts
from scheduler.reconfiguration import left_tenant_file, reconfigure_tenant, retire_tenant
from scheduler.zk.client import ZooKeeperClient
from tests.fixtures.services import ZooKeeperTarget
from tests.layouts.gitrepos import GitRepos
from tests.layouts.world import TENANT, World, make_world


@pytest.fixture
def world(tmp_path: Path, repos: GitRepos, zookeeper: ZooKeeperTarget) -> World:
    return make_world(tmp_path, repos, zookeeper)


def test_only_a_valid_file_without_the_tenant_retires_it(world: World) -> None:
    path = world.settings.tenant_config
    assert not left_tenant_file(world.settings, TENANT)
    path.write_text(path.read_text().replace(f"name: {TENANT}", "name: renamed"))
    assert left_tenant_file(world.settings, TENANT)
    path.write_text(path.read_text() + "- tenant: [broken\n")
    assert not left_tenant_file(world.settings, TENANT)  # an error: keep the tenant
    path.unlink()
    assert not left_tenant_file(world.settings, TENANT)  # unreadable: keep the tenant


def test_a_retired_tenant_has_an_empty_layout(client: ZooKeeperClient, world: World) -> None:
    before = reconfigure_tenant(client, world.settings, TENANT, world.repos.fetch)
    assert before.layout.pipelines
    retired = retire_tenant(client, TENANT)
    assert retired.changed and not retired.layout.pipelines
    assert not TenantLayouts(client).get(TENANT).layout.pipelines
