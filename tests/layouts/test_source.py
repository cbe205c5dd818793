"""The processing seam: managers, frozen jobs, speculative config errors, routing."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from scheduler import scope
from scheduler.config.model import Dependency
from scheduler.layouts import LayoutManagerSource, TenantLayouts
from scheduler.manager.dependent import DependentManager
from scheduler.manager.events import MergeOutcome
from scheduler.manager.independent import IndependentManager
from scheduler.manager.retiring import RetiringManager
from scheduler.manager.window import WindowSettings
from scheduler.reconfiguration import reconfigure_tenant
from scheduler.wire.merger import config_files_key, split_config_files_key
from scheduler.zk.client import ZooKeeperClient
from scheduler.zk.context import Transaction
from tests.fixtures.services import ZooKeeperTarget
from tests.layouts.gitrepos import GitRepos
from tests.layouts.world import APP, APP_BROKEN, TENANT, World, dedent, item, make_world


@pytest.fixture
def world(tmp_path: Path, repos: GitRepos, zookeeper: ZooKeeperTarget) -> World:
    return make_world(tmp_path, repos, zookeeper)


@pytest.fixture
def source(client: ZooKeeperClient, world: World) -> LayoutManagerSource:
    reconfigure_tenant(client, world.settings, TENANT, world.repos.fetch)
    return LayoutManagerSource(TenantLayouts(client))


def test_open_gives_the_pipelines_manager_and_a_ledger_with_the_layouts_maxima(
    client: ZooKeeperClient, source: LayoutManagerSource
) -> None:
    manager, ledger = source.open(client, TENANT, "post")
    assert isinstance(manager, IndependentManager)
    assert manager.settings.name == "post" and not manager.settings.dequeue_on_new_patchset
    assert dict(ledger.maxima) == {"db": 2} and ledger.tenant == TENANT
    # a pipeline not (or no longer) in the layout: its items are dequeued and reported
    retiring, _ = source.open(client, TENANT, "nope")
    assert isinstance(retiring, RetiringManager)
    gate, _ = source.open(client, TENANT, "gate")
    assert isinstance(gate, DependentManager)
    assert gate.settings.window == WindowSettings() and not gate.settings.merge_on_success
    assert gate.settings.queue_for("app", "main") is None


def test_freeze_gives_jobs_with_dependencies_voting_and_semaphores(
    client: ZooKeeperClient, source: LayoutManagerSource
) -> None:
    manager, _ = source.open(client, TENANT, "check")
    result = manager.layouts.freeze(item(), MergeOutcome(ok=True, files=("src/a.py",)))
    assert result.errors == ()
    jobs = {job.name: job for job in result.jobs}
    assert list(jobs) == ["lint", "unit", "integ"]
    assert jobs["lint"].voting is False
    assert jobs["unit"].semaphores == ("db",) and jobs["unit"].attempts == 2
    # the soft dependency on a job that does not run is dropped
    assert jobs["integ"].dependencies == (Dependency("unit"), Dependency("lint", soft=True))
    spec = jobs["unit"].spec
    assert spec["name"] == "unit" and spec["run"][0]["path"] == "playbooks/base.yaml"
    assert spec["timeout"] == 1800


def test_a_change_that_breaks_config_gets_the_errors_as_its_result(
    client: ZooKeeperClient, source: LayoutManagerSource
) -> None:
    manager, _ = source.open(client, TENANT, "check")
    config = {config_files_key("app", "main"): {".zuul.yaml": dedent(APP_BROKEN)}}
    result = manager.layouts.freeze(item(), MergeOutcome(ok=True, config_files=config))
    assert result.jobs == ()
    assert result.errors == (".zuul.yaml:3: project 'app': job 'nonexistent' is not defined",)


def test_a_change_that_edits_config_runs_with_its_own_config(
    client: ZooKeeperClient, source: LayoutManagerSource
) -> None:
    manager, _ = source.open(client, TENANT, "check")
    edited = dedent(APP).replace("jobs: [lint, unit, integ]", "jobs: [lint, unit, integ, new]")
    edited += "- job: {name: new, voting: false}\n"
    config = {config_files_key("app", "main"): {".zuul.yaml": edited}}
    result = manager.layouts.freeze(item(), MergeOutcome(ok=True, config_files=config))
    assert [j.name for j in result.jobs] == ["lint", "unit", "integ", "new"]
    same = {config_files_key("app", "main"): {".zuul.yaml": dedent(APP)}}
    unchanged = manager.layouts.freeze(item(), MergeOutcome(ok=True, config_files=same))
    assert [j.name for j in unchanged.jobs] == ["lint", "unit", "integ"]


def test_a_freeze_error_is_reported_not_raised(
    client: ZooKeeperClient, source: LayoutManagerSource
) -> None:
    manager, _ = source.open(client, TENANT, "post")
    result = manager.layouts.freeze(item("lib"), MergeOutcome(ok=True))
    assert result.errors == () and result.jobs == ()  # lib runs nothing in post


def test_config_files_keys_split_on_the_tenants_project_names() -> None:
    assert split_config_files_key("org/app@feature@x", ["org", "org/app"]) == (
        "org/app",
        "feature@x",
    )
    assert split_config_files_key("a@b@c", ["a", "a@b"]) == ("a@b", "c")
    assert split_config_files_key("other@main", ["app"]) is None


def _ref_updated(project: str, ref: str, **extra: str) -> dict[str, str]:
    return {
        "type": "ref-updated",
        "connection": "git",
        "project": project,
        "ref": ref,
        "oldrev": "1" * 40,
        "newrev": "2" * 40,
        **extra,
    }


def test_routing_follows_the_tenants_and_the_git_triggers(
    source: LayoutManagerSource, world: World, make_client: Callable[[], ZooKeeperClient]
) -> None:
    layouts = source.layouts
    assert layouts is not None
    assert layouts.tenants_for_project("git", "app") == [TENANT]
    assert layouts.tenants_for_project("git", "lib") == [TENANT]  # "other" never reconfigured
    assert layouts.tenants_for_project("elsewhere", "app") == []
    reconfigure_tenant(make_client(), world.settings, "other", world.repos.fetch)
    assert layouts.tenants_for_project("git", "lib") == [TENANT, "other"]  # the epoch moved
    route = layouts.pipelines_for_event
    assert route(TENANT, _ref_updated("app", "refs/heads/main")) == ["check", "post"]
    assert route(TENANT, _ref_updated("app", "main")) == ["check", "post"]
    assert route(TENANT, _ref_updated("app", "refs/heads/dev", branch="dev")) == ["check"]
    assert route(TENANT, _ref_updated("app", "refs/tags/v1")) == []  # check wants heads
    assert route(TENANT, {**_ref_updated("app", "main"), "newrev": "0" * 40}) == []
    assert route(TENANT, {**_ref_updated("app", "main"), "type": "other"}) == []
    assert route(TENANT, _ref_updated("lib", "main")) == []  # lib has no jobs there
    assert route(TENANT, _ref_updated("nope", "main")) == []


def test_a_global_semaphore_is_shared_by_the_tenants_that_list_it(
    client: ZooKeeperClient, world: World
) -> None:
    main_yaml = world.settings.tenant_config
    text = (
        main_yaml.read_text()
        .replace("    name: example\n", "    name: example\n    semaphores: [db]\n")
        .replace("    name: other\n", "    name: other\n    semaphores: [db]\n")
    )
    main_yaml.write_text("- global-semaphore: {name: db, max: 1}\n" + text)
    for tenant in (TENANT, "other"):
        reconfigure_tenant(client, world.settings, tenant, world.repos.fetch)
    source = LayoutManagerSource(TenantLayouts(client))
    _, first = source.open(client, TENANT, "check")
    _, second = source.open(client, "other", "check")
    # the global one wins over the config's tenant semaphore of the same name
    assert first.maxima["db"] == 1 and "db" in first.global_names
    assert first.try_acquire("db", "bs-1/unit")
    txn = Transaction(client)
    first.add_ops(txn)
    txn.commit()
    assert not second.try_acquire("db", "bs-2/unit"), "the other tenant shares the slot"


def test_a_pass_validates_the_layout_once(
    client: ZooKeeperClient, source: LayoutManagerSource
) -> None:
    layouts = source.layouts
    assert layouts is not None
    layouts.get(TENANT)  # built and cached
    with client.counting_requests() as outside:
        layouts.get(TENANT)
        layouts.get(TENANT)
    assert outside.total == 2  # one exists per use
    with client.counting_requests() as inside, scope.validation_scope():
        first = layouts.get(TENANT)
        assert layouts.get(TENANT) is first
        source.open(client, TENANT, "check")
    assert inside.total == 1  # the pass's commit is fenced by the layout's version
