"""Configuration objects: plain frozen data, no I/O.

These are the parsed, validated forms of the objects in project
configuration files. Each keeps the :class:`SourceContext` it came from
(project, branch, file, line, trusted or not), which error messages,
playbook lookup and implied branch matchers need.

Job variants keep only the attributes that were set (``attrs``, keyed by
the YAML attribute name); freezing (:mod:`scheduler.config.freeze`)
combines them with the inheritance rules of each attribute.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from scheduler.crypto import ENCRYPTED

MANAGERS = ("independent", "dependent", "serial", "supercedent")
PRECEDENCES = ("high", "normal", "low")
# Zuul's built-in job: every tenant has it, it needs no definition, no
# executor and no node, and it always succeeds (the scheduler completes its
# build itself: scheduler.manager.base). It may not be defined again.
NOOP_JOB = "noop"


@dataclass(frozen=True)
class SourceContext:
    project: str
    branch: str
    path: str
    line: int
    trusted: bool

    def where(self) -> str:
        return f"{self.path}:{self.line}"


@dataclass(frozen=True)
class Playbook:
    """A playbook path in the repo (and branch) of the variant that set it.

    ``secrets`` (set when a job is frozen) pairs each name the playbook sees
    a secret under with the secret's key in :attr:`FrozenJob.secrets`: a
    secret is bound to the playbooks of the job definition that names it
    (and, with ``pass-to-parent``, to its parents' playbooks), never to
    those a child job adds.
    """

    path: str
    project: str
    branch: str
    trusted: bool
    secrets: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Encrypted:
    """An ``!encrypted/pkcs1-oaep`` YAML value: base64 chunks, each RSA-OAEP ciphertext."""

    chunks: tuple[str, ...]

    def to_json(self) -> dict[str, list[str]]:
        return {ENCRYPTED: list(self.chunks)}


@dataclass(frozen=True)
class Secret:
    """A ``secret:``: data whose encrypted leaves only the executor decrypts.

    ``data`` is plain JSON in which each encrypted value is
    ``{ENCRYPTED: [chunks]}``; ``connection`` and ``source.project`` name the
    project key pair that decrypts it.
    """

    name: str
    source: SourceContext
    connection: str
    data: Mapping[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> str:
        """Unique in a layout: the same name may be defined on several branches."""
        return f"{self.source.project}@{self.source.branch}:{self.name}"


@dataclass(frozen=True)
class JobSecret:
    """One entry of a job's ``secrets:``: seen as ``name``, defined as ``secret``."""

    name: str
    secret: str
    pass_to_parent: bool = False


@dataclass(frozen=True)
class RequiredProject:
    name: str
    override_checkout: str | None = None


@dataclass(frozen=True)
class Dependency:
    name: str
    soft: bool = False


@dataclass(frozen=True)
class JobVariant:
    """One ``job:`` definition, or one job entry of a project pipeline.

    ``attrs`` holds only what this definition sets. ``branches`` is the
    explicit branch matcher; ``implied_branch`` the branch the definition
    was read from when Zuul's implied branch matcher applies.
    """

    name: str
    source: SourceContext
    attrs: Mapping[str, Any] = field(default_factory=dict)
    branches: tuple[str, ...] | None = None
    implied_branch: str | None = None
    # how errors name it: "job 'unit'" or "project 'app': check"
    origin: str = ""
    # attribute -> line, for errors about one attribute
    lines: Mapping[str, int] = field(default_factory=dict)

    def line_of(self, key: str) -> int:
        return self.lines.get(key, self.source.line)

    @property
    def parent(self) -> str | None:
        value: str | None = self.attrs.get("parent")
        return value

    @property
    def is_base(self) -> bool:
        return "parent" in self.attrs and self.attrs["parent"] is None


@dataclass(frozen=True)
class ProjectPipeline:
    """The job list of one project (or template) in one pipeline."""

    pipeline: str
    jobs: tuple[JobVariant, ...]
    line: int
    queue: str | None = None
    fail_fast: bool | None = None


@dataclass(frozen=True)
class ProjectConfig:
    """A ``project:`` stanza (``template`` True for ``project-template:``)."""

    name: str
    source: SourceContext
    pipelines: tuple[ProjectPipeline, ...] = ()
    templates: tuple[str, ...] = ()
    queue: str | None = None
    vars: Mapping[str, Any] = field(default_factory=dict)
    default_branch: str | None = None
    merge_mode: str | None = None
    implied_branch: str | None = None
    template: bool = False
    lines: Mapping[str, int] = field(default_factory=dict)

    def line_of(self, key: str) -> int:
        return self.lines.get(key, self.source.line)


@dataclass(frozen=True)
class Window:
    """Dependent pipeline window (Zuul's defaults)."""

    window: int = 20
    floor: int = 3
    ceiling: int | None = None
    increase_type: str = "linear"
    increase_factor: int = 1
    decrease_type: str = "exponential"
    decrease_factor: int = 2


@dataclass(frozen=True)
class BatchConfig:
    """Testing several changes of a dependent queue as one item (``batch:``, Sluice's own).

    Up to ``size`` consecutive changes are tested on one buildset; the first
    waits at most ``max_wait`` seconds for the others. A failed batch is
    split in halves, recursively, ``max_bisect_depth`` times at most; after
    that its changes are tested one by one.
    """

    size: int = 1
    max_wait: float = 0.0
    max_bisect_depth: int = 1


@dataclass(frozen=True)
class Pipeline:
    name: str
    source: SourceContext
    manager: str
    description: str = ""
    precedence: str = "normal"
    dequeue_on_new_patchset: bool = True
    supercedes: tuple[str, ...] = ()
    post_review: bool = False
    # connection name -> list of event filters (plain JSON)
    trigger: Mapping[str, tuple[Mapping[str, Any], ...]] = field(default_factory=dict)
    # action (start, success, ...) -> connection name -> reporter options
    reporters: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    require: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    reject: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    window: Window | None = None
    messages: Mapping[str, str] = field(default_factory=dict)
    # Zuul's disable-after-consecutive-failures (None: never disabled)
    disable_after: int | None = None
    batch: BatchConfig | None = None
    # Sluice's own: a failed item waits for this many items behind it to finish
    pending_failure_depth: int = 0
    # Sluice's own: a gate failure's job is run again to judge it (flaky, culprit, base)
    failure_verdict: bool = False


@dataclass(frozen=True)
class Semaphore:
    name: str
    max: int
    source: SourceContext | None = None


@dataclass(frozen=True)
class Queue:
    name: str
    source: SourceContext
    per_branch: bool = False
    allow_circular_dependencies: bool = False
    batch: BatchConfig | None = None
    # None: the pipeline's
    pending_failure_depth: int | None = None


@dataclass(frozen=True)
class Nodeset:
    """Accepted and recorded; nodes are provided by a later issue."""

    name: str
    source: SourceContext
    spec: Mapping[str, Any] = field(default_factory=dict)
