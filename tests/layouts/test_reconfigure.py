"""Reconfiguration: the cache filled, the layout recorded, rebuilt anywhere, last good kept."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest

from scheduler.layouts import (
    LayoutState,
    TenantLayouts,
    TenantNotFoundError,
    tenant_from_dict,
    tenant_to_dict,
)
from scheduler.reconfiguration import reconfigure_tenant
from scheduler.stores import config_cache as cc
from scheduler.zk import locks, paths
from scheduler.zk.client import ZooKeeperClient, attach
from scheduler.zk.errors import LockLostError, ZooKeeperError
from tests.fixtures.services import ZooKeeperTarget
from tests.fixtures.waiting import wait_until
from tests.layouts.gitrepos import GitRepos
from tests.layouts.world import APP, APP_BROKEN, TENANT, World, dedent, make_world

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def world(tmp_path: Path, repos: GitRepos, zookeeper: ZooKeeperTarget) -> World:
    return make_world(tmp_path, repos, zookeeper)


def test_reconfiguration_builds_and_records_a_layout(client: ZooKeeperClient, world: World) -> None:
    result = reconfigure_tenant(client, world.settings, TENANT, world.repos.fetch)
    assert result.changed and result.errors == ()
    assert sorted(world.repos.fetches) == [("git", "app"), ("git", "config"), ("git", "lib")]
    state = result.state
    assert state.layout_hash == result.layout.content_hash()
    assert state.ltime > 0 and state.uuid
    assert [(s.project, s.branch) for s in state.sources] == [
        ("config", "main"),
        ("app", "main"),
        ("lib", "main"),
    ]
    assert state.tenant.name == TENANT and tenant_from_dict(tenant_to_dict(state.tenant)) == (
        state.tenant
    )
    cached = cc.read_branch(client, "git", "app", "main")
    assert cached is not None and set(cached[1].files) == {".zuul.yaml"}
    assert set(result.layout.pipelines) == {"check", "post", "gate"}
    again = reconfigure_tenant(client, world.settings, TENANT, world.repos.fetch)
    assert not again.changed and again.state == state  # nothing changed, nothing written


def _rebuild_in_process(zookeeper: ZooKeeperTarget, seed: str) -> str:
    env = dict(os.environ, PYTHONHASHSEED=seed)
    done = subprocess.run(
        [sys.executable, "-m", "tests.layouts.rebuild", zookeeper.hosts, zookeeper.root, TENANT],
        cwd=ROOT,
        env=env,
        capture_output=True,
        check=True,
        timeout=120,
    )
    return done.stdout.decode("ascii")


def test_two_processes_rebuild_byte_identical_layouts_from_zookeeper_alone(
    client: ZooKeeperClient, world: World, zookeeper: ZooKeeperTarget
) -> None:
    world.repos.commit("app", "stable/1", {".zuul.yaml": dedent(APP_BROKEN)})  # with errors
    result = reconfigure_tenant(client, world.settings, TENANT, world.repos.fetch)
    assert result.errors  # errors are part of what must be reproduced
    shutil.rmtree(world.repos.root)  # no git, no merger, no main.yaml: only ZooKeeper
    world.settings.tenant_config.unlink()
    first = _rebuild_in_process(zookeeper, "1")
    second = _rebuild_in_process(zookeeper, "2")
    assert first == second
    messages = [e.describe() for e in result.errors]
    assert first == "\n".join([result.layout.to_json(), result.state.uuid, *messages]) + "\n"
    assert list(result.state.errors) == messages == result.messages  # nothing kept here


def test_a_broken_branch_update_keeps_the_last_good_layout_and_says_why(
    client: ZooKeeperClient, world: World, make_client: Callable[[], ZooKeeperClient]
) -> None:
    good = reconfigure_tenant(client, world.settings, TENANT, world.repos.fetch)
    world.repos.commit("app", "main", {".zuul.yaml": dedent(APP_BROKEN)})
    broken = reconfigure_tenant(client, world.settings, TENANT, world.repos.fetch)
    assert broken.changed
    assert broken.layout.content_hash() == good.layout.content_hash()
    assert broken.messages == list(broken.state.kept[0].errors)
    (kept,) = broken.state.kept
    assert (kept.project, kept.branch) == ("app", "main")
    assert kept.errors == (
        "app@main: .zuul.yaml:3: project 'app': job 'nonexistent' is not defined",
    )
    # the cache holds the new (broken) files; the state names the last good ones
    cached = cc.read_branch(client, "git", "app", "main")
    assert cached is not None and "nonexistent" in cached[1].files[".zuul.yaml"]
    elsewhere = TenantLayouts(make_client()).get(TENANT)
    assert elsewhere.layout.to_json() == good.layout.to_json()
    assert elsewhere.state.kept == broken.state.kept
    # once fixed, the update is taken and nothing is kept any more
    world.repos.commit("app", "main", {".zuul.yaml": dedent(APP).replace("lint", "style")})
    fixed = reconfigure_tenant(client, world.settings, TENANT, world.repos.fetch)
    assert fixed.state.kept == () and "style" in fixed.layout.jobs


def test_the_write_lock_excludes_readers(
    client: ZooKeeperClient, world: World, make_client: Callable[[], ZooKeeperClient]
) -> None:
    reconfigure_tenant(client, world.settings, TENANT, world.repos.fetch)
    world.repos.commit("app", "main", {".zuul.yaml": dedent(APP) + "- job: {name: extra}\n"})
    inside, release = threading.Event(), threading.Event()
    outcome: dict[str, object] = {}

    def slow_fetch(connection: str, project: str) -> Mapping[str, Mapping[str, str]]:
        inside.set()
        assert release.wait(30)
        return world.repos.fetch(connection, project)

    def reconfigure() -> None:
        outcome["writer"] = reconfigure_tenant(client, world.settings, TENANT, slow_fetch)

    def read() -> None:
        outcome["reader"] = TenantLayouts(make_client(), lock_timeout=30).get(TENANT)

    writer = threading.Thread(target=reconfigure)
    writer.start()
    wait_until(inside.is_set, what="the reconfiguration to hold the write lock")
    reader = threading.Thread(target=read)
    reader.start()
    wait_until(
        lambda: "layout-reader" in locks.contenders(client, paths.tenant_lock(TENANT)),
        what="the reader to queue for the read lock",
    )
    assert "reader" not in outcome  # it waits while the tenant is reconfigured
    release.set()
    writer.join(30)
    reader.join(30)
    written = outcome["writer"]
    read_layout = outcome["reader"]
    assert read_layout.state.uuid == written.state.uuid  # type: ignore[attr-defined]
    assert "extra" in read_layout.layout.jobs  # type: ignore[attr-defined]


def test_a_layout_cache_is_invalidated_when_another_process_reconfigures(
    client: ZooKeeperClient, world: World, make_client: Callable[[], ZooKeeperClient]
) -> None:
    first = reconfigure_tenant(client, world.settings, TENANT, world.repos.fetch)
    layouts = TenantLayouts(make_client())
    assert layouts.get(TENANT).state.uuid == first.state.uuid
    assert layouts.get(TENANT).state.uuid == first.state.uuid
    assert layouts.rebuilds == 1  # the second use was validated, not rebuilt
    world.repos.commit("app", "main", {".zuul.yaml": dedent(APP) + "- job: {name: extra}\n"})
    second = reconfigure_tenant(make_client(), world.settings, TENANT, world.repos.fetch)
    current = layouts.get(TENANT)
    assert layouts.rebuilds == 2
    assert current.state.uuid == second.state.uuid != first.state.uuid
    assert "extra" in current.layout.jobs
    assert isinstance(current.state, LayoutState)


def test_an_unknown_tenant_is_a_clear_error(client: ZooKeeperClient, world: World) -> None:
    with pytest.raises(TenantNotFoundError, match="'nope'"):
        reconfigure_tenant(client, world.settings, "nope", world.repos.fetch)


def test_a_vanished_branch_leaves_the_layout(client: ZooKeeperClient, world: World) -> None:
    world.repos.commit("app", "stable/1", {".zuul.yaml": dedent(APP)})
    with_stable = reconfigure_tenant(client, world.settings, TENANT, world.repos.fetch)
    assert with_stable.layout.branches["app"] == ("main", "stable/1")
    world.repos.git("app", "checkout", "-q", "main")
    world.repos.git("app", "branch", "-q", "-D", "stable/1")
    without = reconfigure_tenant(client, world.settings, TENANT, world.repos.fetch)
    assert without.layout.branches["app"] == ("main",)
    assert cc.read_branch(client, "git", "app", "stable/1") is None


LIB_GOOD = "- job: {name: libjob}\n- project:\n    check:\n      jobs: [libjob]\n"
LIB_BROKEN = "- project:\n    check:\n      jobs: [missing]\n"


def test_files_another_tenant_still_uses_survive_a_reconfiguration(
    client: ZooKeeperClient, world: World, make_client: Callable[[], ZooKeeperClient]
) -> None:
    world.repos.commit("lib", "main", {".zuul.yaml": LIB_GOOD})
    reconfigure_tenant(client, world.settings, "other", world.repos.fetch)
    world.repos.commit("lib", "main", {".zuul.yaml": LIB_BROKEN})
    other = reconfigure_tenant(client, world.settings, "other", world.repos.fetch)
    assert [(k.project, k.branch) for k in other.state.kept] == [("lib", "main")]
    world.repos.commit("lib", "main", {".zuul.yaml": LIB_GOOD + "- job: {name: more}\n"})
    example = reconfigure_tenant(client, world.settings, TENANT, world.repos.fetch)
    assert "more" in example.layout.jobs and example.state.kept == ()
    # example's prune removed the broken version, not the one "other" still uses
    files = client.get_children(paths.parent(paths.config_file("git", "lib", "main", "-")))
    assert len(files) == 2
    rebuilt = TenantLayouts(make_client()).get("other")
    assert rebuilt.state.uuid == other.state.uuid and "libjob" in rebuilt.layout.jobs


def test_a_reconfiguration_that_lost_its_lock_records_nothing(
    world: World, make_client: Callable[..., ZooKeeperClient]
) -> None:
    stale_client = make_client(session_timeout=1.0)
    successor = make_client()
    reconfigure_tenant(successor, world.settings, TENANT, world.repos.fetch)
    inside, release = threading.Event(), threading.Event()
    failure: list[BaseException] = []

    def slow_fetch(connection: str, project: str) -> Mapping[str, Mapping[str, str]]:
        inside.set()
        assert release.wait(30)
        return world.repos.fetch(connection, project)

    def stale() -> None:
        try:
            reconfigure_tenant(stale_client, world.settings, TENANT, slow_fetch)
        except ZooKeeperError as exc:
            failure.append(exc)

    thread = threading.Thread(target=stale)
    thread.start()
    wait_until(inside.is_set, what="the first reconfiguration to hold the write lock")
    generation = stale_client.session_generation
    twin = attach(stale_client.settings, *stale_client.kazoo.client_id)
    twin.stop()
    twin.close()  # the server ends the stale holder's session: its lock node is gone
    world.repos.commit("app", "main", {".zuul.yaml": dedent(APP) + "- job: {name: extra}\n"})
    newer = reconfigure_tenant(
        successor, world.settings, TENANT, world.repos.fetch, lock_timeout=20
    )
    wait_until(lambda: stale_client.session_generation > generation, what="the stale LOST")
    wait_until(lambda: stale_client.state.value == "CONNECTED", what="a new stale session")
    release.set()
    thread.join(30)
    assert len(failure) == 1 and isinstance(failure[0], LockLostError), failure
    state = cc.load_layout_state(successor, TENANT)
    assert state is not None and state.data["uuid"] == newer.state.uuid
