"""The layout of one tenant: every configuration object, ready to freeze.

A :class:`Layout` is immutable, holds no I/O and serialises to canonical
JSON (:meth:`Layout.to_json`); two processes given the same input build
byte-identical JSON and the same :meth:`Layout.content_hash`, which is what
lets a layout stored in ZooKeeper be checked by any worker.

Build one with :func:`scheduler.config.loader.build_layout`; freeze the
jobs of an item with :func:`scheduler.config.graph.freeze_job_graph`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from scheduler.config.errors import ConfigError
from scheduler.config.model import (
    JobVariant,
    Nodeset,
    Pipeline,
    ProjectConfig,
    ProjectPipeline,
    Queue,
    Secret,
    Semaphore,
)
from scheduler.config.serialize import canonical_json, content_hash

LAYOUT_SCHEMA = 1


@dataclass(frozen=True)
class Layout:
    tenant: str
    default_parent: str = "base"
    max_job_timeout: int | None = None
    pipelines: Mapping[str, Pipeline] = field(default_factory=dict)
    jobs: Mapping[str, tuple[JobVariant, ...]] = field(default_factory=dict)
    projects: Mapping[str, tuple[ProjectConfig, ...]] = field(default_factory=dict)
    templates: Mapping[str, tuple[ProjectConfig, ...]] = field(default_factory=dict)
    semaphores: Mapping[str, Semaphore] = field(default_factory=dict)
    queues: Mapping[str, Queue] = field(default_factory=dict)
    nodesets: Mapping[str, Nodeset] = field(default_factory=dict)
    # name -> its definitions (one project; one per branch at most)
    secrets: Mapping[str, tuple[Secret, ...]] = field(default_factory=dict)
    # project -> branches whose configuration was loaded (sorted)
    branches: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    schema: int = LAYOUT_SCHEMA

    def to_json(self) -> str:
        """Canonical JSON of the whole layout (sorted keys, ASCII)."""
        return canonical_json(self)

    def content_hash(self) -> str:
        return content_hash(self)

    def semaphore(self, name: str) -> Semaphore:
        """A defined semaphore, or Zuul's implicit one with max 1."""
        return self.semaphores.get(name) or Semaphore(name, 1)

    def secret_for(self, name: str, project: str, branch: str) -> Secret | None:
        """``name`` as defined by ``project``: on ``branch`` if it is there, else its first."""
        own = [s for s in self.secrets.get(name, ()) if s.source.project == project]
        on_branch = [s for s in own if s.source.branch == branch]
        found = on_branch or own
        return found[0] if found else None

    def project_pipelines(
        self, project: str, branch: str, pipeline: str
    ) -> list[tuple[ProjectConfig, ProjectPipeline]]:
        """The stanzas' job lists for ``pipeline`` that apply on ``branch``.

        Templates a stanza names come before the stanza's own jobs.
        """
        result: list[tuple[ProjectConfig, ProjectPipeline]] = []
        for stanza in self.projects.get(project, ()):
            if stanza.implied_branch not in (None, branch):
                continue
            for name in stanza.templates:
                for template in self.templates.get(name, ()):
                    if template.implied_branch in (None, branch):
                        result.extend(
                            (template, p) for p in template.pipelines if p.pipeline == pipeline
                        )
            result.extend((stanza, p) for p in stanza.pipelines if p.pipeline == pipeline)
        return result

    def merge_mode(self, project: str, branch: str) -> str:
        """The project's ``merge-mode`` on ``branch`` (the last stanza that sets it; merge)."""
        mode = "merge"
        for stanza in self.projects.get(project, ()):
            if stanza.implied_branch in (None, branch) and stanza.merge_mode:
                mode = stanza.merge_mode
        return mode

    def queue_for(self, project: str, branch: str, pipeline: str) -> tuple[str, bool] | None:
        """The shared change queue of the project (name, per branch), if set."""
        name = None
        for stanza in self.projects.get(project, ()):
            if stanza.implied_branch in (None, branch):
                name = stanza.queue or name
        for _, project_pipeline in self.project_pipelines(project, branch, pipeline):
            name = project_pipeline.queue or name
        if name is None:
            return None
        queue = self.queues.get(name)
        return name, bool(queue and queue.per_branch)


@dataclass(frozen=True)
class LayoutResult:
    """A layout plus what was wrong with the configuration it came from."""

    layout: Layout
    errors: tuple[ConfigError, ...] = ()
    warnings: tuple[ConfigError, ...] = ()

    def errors_for(self, project: str, branch: str | None = None) -> list[ConfigError]:
        return [
            e
            for e in self.errors
            if e.project == project and (branch is None or e.branch == branch)
        ]

    def to_dict(self) -> dict[str, Any]:
        return {
            "layout-hash": self.layout.content_hash(),
            "errors": [e.to_dict() for e in self.errors],
            "warnings": [e.to_dict() for e in self.warnings],
        }


def new_errors(before: Sequence[ConfigError], after: Sequence[ConfigError]) -> list[ConfigError]:
    """Errors of ``after`` that ``before`` did not have (lines ignored).

    What a change that edits configuration is blamed for: errors that were
    already there before the change are not its fault.
    """
    known = {e.key() for e in before}
    return [e for e in after if e.key() not in known]
