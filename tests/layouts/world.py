"""A tenant over real git repositories: main.yaml, settings, project configs."""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from pathlib import Path

from scheduler.model.change import Change
from scheduler.model.item import BuildSet, QueueItem
from scheduler.settings.sections import ConnectionSettings, Settings
from tests.fixtures.services import ZooKeeperTarget
from tests.layouts.gitrepos import GitRepos

TENANT = "example"

MAIN_YAML = """
- tenant:
    name: example
    source:
      git:
        config-projects:
          - config
        untrusted-projects:
          - app
          - lib
- tenant:
    name: other
    source:
      git:
        config-projects:
          - config
        untrusted-projects:
          - lib
"""

PIPELINES = """
- pipeline:
    name: check
    manager: independent
    trigger:
      git:
        - event: ref-updated
          ref: ^refs/heads/.*$
- pipeline:
    name: post
    manager: independent
    dequeue-on-new-patchset: false
    trigger:
      git:
        - event: ref-updated
          branch: ^main$
- pipeline:
    name: gate
    manager: dependent
- semaphore: {name: db, max: 2}
- job:
    name: base
    parent: null
    run: playbooks/base.yaml
    timeout: 1800
"""

APP = """
- job:
    name: lint
    voting: false
- job:
    name: unit
    semaphores: [db]
    attempts: 2
- job:
    name: integ
    dependencies: [unit, {name: lint, soft: true}, {name: docs, soft: true}]
- project:
    check:
      jobs: [lint, unit, integ]
    post:
      jobs: [unit]
"""

# a broken update: line 3 names a job nobody defines
APP_BROKEN = """
- project:
    check:
      jobs: [nonexistent]
"""


def dedent(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


@dataclass
class World:
    repos: GitRepos
    settings: Settings

    def populate(self) -> None:
        self.repos.commit("config", "main", {"zuul.d/pipelines.yaml": dedent(PIPELINES)})
        self.repos.commit("app", "main", {".zuul.yaml": dedent(APP), "src/a.py": "print(1)\n"})
        self.repos.commit("lib", "main", {"README": "lib\n"})


def make_world(tmp_path: Path, repos: GitRepos, zookeeper: ZooKeeperTarget) -> World:
    main_yaml = tmp_path / "main.yaml"
    main_yaml.write_text(dedent(MAIN_YAML), encoding="utf-8")
    settings = Settings(
        zookeeper=zookeeper.settings(),
        broker_url="memory://",
        database_url="sqlite://",
        state_dir=tmp_path / "state",
        tenant_config=main_yaml,
        connections={"git": ConnectionSettings("git", "git", str(repos.root))},
    )
    world = World(repos, settings)
    world.populate()
    return world


def item(project: str = "app", branch: str = "main") -> QueueItem:
    change = Change("git", project, branch, "refs/heads/feature", "c" * 40)
    return QueueItem("item-1", change, "app", BuildSet("bs-1"), 0.0)
