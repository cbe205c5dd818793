"""Which branches of a project a reconfiguration reads (pure)."""

from __future__ import annotations

from scheduler.config import TenantProject
from scheduler.reconfiguration import FetchedBranches, branches_to_read

FILES = {"zuul.yaml": "- job: {name: base, parent: null}\n"}


def project(trusted: bool, load_branch: str | None = None) -> TenantProject:
    return TenantProject("config", "local", trusted, load_branch=load_branch)


def test_a_config_project_is_read_from_its_default_branch() -> None:
    fetched = FetchedBranches({"trunk": FILES, "review/x": {}, "main": FILES}, "trunk")
    assert list(branches_to_read(project(True), fetched)) == ["trunk"]


def test_load_branch_wins_over_the_default_branch() -> None:
    fetched = FetchedBranches({"trunk": FILES, "stable": FILES}, "trunk")
    assert list(branches_to_read(project(True, "stable"), fetched)) == ["stable"]


def test_without_a_known_default_main_then_master() -> None:
    assert list(branches_to_read(project(True), {"master": FILES, "review/x": {}})) == ["master"]
    assert list(branches_to_read(project(True), {"main": FILES, "master": FILES})) == ["main"]


def test_untrusted_projects_keep_every_branch() -> None:
    fetched = FetchedBranches({"main": FILES, "stable": FILES}, "main")
    assert sorted(branches_to_read(project(False), fetched)) == ["main", "stable"]


def test_no_default_to_be_found_is_left_to_the_loader() -> None:
    # the loader then says: a config project is read from one branch; set load-branch
    both = {"a": FILES, "b": FILES}
    assert sorted(branches_to_read(project(True), both)) == ["a", "b"]
