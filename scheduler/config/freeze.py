"""Freezing one job: inheritance and variants resolved for one item.

For a job name, a project, a branch and a pipeline:

1. The *inheritance chain* comes from the job's first (reference)
   definition: its ``parent``, or the tenant's ``default-parent``, up to a
   base job (``parent: null``). A later variant may not name a different
   parent (checked when the layout is built).
2. From the base down, every variant of every job in the chain whose
   branch matcher matches is applied, in definition order. A variant's
   branch matcher is its ``branches`` or, failing that, its implied
   branch (Zuul's rule for untrusted projects with several branches).
   The job itself must have at least one matching variant, or it does not
   run for this item (a parent without one contributes nothing).
3. The job entries of the project pipeline are applied last, each only
   if its own ``branches`` match.

How each attribute combines (Zuul's defaults):

* override: description, voting, timeout, post-timeout, attempts, run,
  nodeset, files, irrelevant-files, dependencies;
* deep merge: vars;
* union in order, without duplicates: required-projects (by name, the
  later entry wins), semaphores, tags, failure-output, provides, requires;
* nesting: pre-run is appended (parent's first), post-run prepended
  (child's first);
* ``abstract``: once set by a variant of a job it stays set for that job,
  and is not inherited by children; an abstract frozen job cannot run.
* ``final``: after a final variant, later variants and project entries
  may only change description, files, irrelevant-files, voting,
  dependencies and tags; a child job may not inherit from it.
* ``protected``: after a protected variant, only variants and children
  from the same project may apply.
* ``secrets``: each is bound to the playbooks of the definition that names
  it (with ``pass-to-parent``, to the playbooks already there too: its
  parents'); a child's playbooks never see a parent's secrets. A secret of
  an untrusted project makes the job ``post-review``.
* ``post-review``: once set it stays set; a post-review job does not run in
  a pipeline that is not ``post-review`` (the item reports why).
* ``allowed-projects``: each variant that sets it narrows it further; a
  project outside it may not run the job.

File matchers are evaluated on the frozen result: with ``files``, the job
runs if any changed file matches one; with ``irrelevant-files``, it does
not run if every changed file matches one. An unknown or empty file list
matches (Zuul's behaviour for refs without files).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from scheduler.config.errors import FreezeError, NotPermittedError
from scheduler.config.layout import Layout
from scheduler.config.model import (
    Dependency,
    JobSecret,
    JobVariant,
    Playbook,
    RequiredProject,
    Semaphore,
)
from scheduler.config.regex import matches_any
from scheduler.config.serialize import to_plain
from scheduler.jsondata import deep_merge

OVERRIDE = (
    "description",
    "voting",
    "timeout",
    "post-timeout",
    "attempts",
    "run",
    "nodeset",
    "files",
    "irrelevant-files",
    "dependencies",
    "zone",
)
ALLOWED_AFTER_FINAL = frozenset(
    {"description", "files", "irrelevant-files", "voting", "dependencies", "tags"}
)
DEFAULT_ATTEMPTS = 3
# Version of the stored form of a frozen job; readers accept older ones.
FROZEN_SCHEMA = 1


@dataclass(frozen=True)
class FrozenJob:
    """Everything needed to run one job for one item; plain data.

    The one form of a job from freezing to the executor: the buildset keeps
    its plain form (:meth:`to_dict`), the build request carries that form
    as it is, and the executor reads it back (:meth:`from_dict`) into a job
    equal to this one (:mod:`scheduler.wire.build_spec`).
    """

    name: str
    project: str
    branch: str
    pipeline: str
    parent: str | None = None
    # where each applied variant came from, in application order
    variants: tuple[str, ...] = ()
    description: str = ""
    voting: bool = True
    timeout: int | None = None
    post_timeout: int | None = None
    attempts: int = DEFAULT_ATTEMPTS
    pre_run: tuple[Playbook, ...] = ()
    run: tuple[Playbook, ...] = ()
    post_run: tuple[Playbook, ...] = ()
    vars: Mapping[str, Any] = field(default_factory=dict)
    required_projects: tuple[RequiredProject, ...] = ()
    dependencies: tuple[Dependency, ...] = ()
    semaphores: tuple[Semaphore, ...] = ()
    nodeset: Any = None
    tags: tuple[str, ...] = ()
    files: tuple[str, ...] = ()
    irrelevant_files: tuple[str, ...] = ()
    # the executor zone that runs it ("" = any unzoned executor)
    zone: str = ""
    # Secret.key -> {"connection", "project", "name", "data"}; data still encrypted
    secrets: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    post_review: bool = False
    # None: any project may run it
    allowed_projects: tuple[str, ...] | None = None
    schema: int = FROZEN_SCHEMA
    # regexes searched in the output lines of its run steps (Zuul's failure-output)
    failure_output: tuple[str, ...] = ()
    # Zuul's provides and requires (names shared with jobs of other changes)
    provides: tuple[str, ...] = ()
    requires: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The plain form: JSON-ready, keys named as in the configuration (``pre-run``)."""
        plain: dict[str, Any] = to_plain(self)
        return plain

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FrozenJob:
        """The inverse of ``to_dict``; absent keys take their defaults."""
        get = data.get
        return cls(
            name=data["name"],
            project=data["project"],
            branch=data["branch"],
            pipeline=data["pipeline"],
            parent=get("parent"),
            variants=tuple(get("variants", ())),
            description=get("description", ""),
            voting=get("voting", True),
            timeout=get("timeout"),
            post_timeout=get("post-timeout"),
            attempts=get("attempts", DEFAULT_ATTEMPTS),
            pre_run=_playbooks(get("pre-run", ())),
            run=_playbooks(get("run", ())),
            post_run=_playbooks(get("post-run", ())),
            vars=get("vars", {}),
            required_projects=tuple(
                RequiredProject(p["name"], p.get("override-checkout"))
                for p in get("required-projects", ())
            ),
            dependencies=tuple(
                Dependency(d["name"], d.get("soft", False)) for d in get("dependencies", ())
            ),
            semaphores=tuple(Semaphore(s["name"], s["max"]) for s in get("semaphores", ())),
            nodeset=get("nodeset"),
            tags=tuple(get("tags", ())),
            files=tuple(get("files", ())),
            irrelevant_files=tuple(get("irrelevant-files", ())),
            zone=get("zone", ""),
            secrets=get("secrets", {}),
            post_review=get("post-review", False),
            allowed_projects=_optional_tuple(get("allowed-projects")),
            schema=get("schema", FROZEN_SCHEMA),
            failure_output=tuple(get("failure-output", ())),
            provides=tuple(get("provides", ())),
            requires=tuple(get("requires", ())),
        )

    def projects_used(self) -> tuple[str, ...]:
        """The projects a build needs: its own, its required projects, those holding steps."""
        used = {self.project, *(r.name for r in self.required_projects)}
        used.update(p.project for phase in (self.pre_run, self.run, self.post_run) for p in phase)
        return tuple(sorted(used))

    def matches_files(self, files: Sequence[str] | None) -> bool:
        if not files:
            return True
        if self.files and not any(matches_any(self.files, f) for f in files):
            return False
        return not (
            self.irrelevant_files and all(matches_any(self.irrelevant_files, f) for f in files)
        )


def _playbooks(items: Sequence[Mapping[str, Any]]) -> tuple[Playbook, ...]:
    return tuple(
        Playbook(
            p["path"],
            p["project"],
            p["branch"],
            p["trusted"],
            tuple((alias, key) for alias, key in p.get("secrets", ())),
        )
        for p in items
    )


def _optional_tuple(value: Sequence[str] | None) -> tuple[str, ...] | None:
    return None if value is None else tuple(value)


def variant_matches(variant: JobVariant, branch: str) -> bool:
    if variant.branches is not None:
        return matches_any(variant.branches, branch)
    return variant.implied_branch in (None, branch)


def inheritance_chain(layout: Layout, name: str) -> list[str]:
    """Job names from the base job down to ``name`` (reference parents)."""
    chain = [name]
    while True:
        variants = layout.jobs.get(chain[-1])
        if not variants:
            if len(chain) == 1:
                raise FreezeError(f"job {name!r} is not defined")
            raise FreezeError(f"job {chain[-2]!r}: parent job {chain[-1]!r} is not defined")
        reference = variants[0]
        if reference.is_base:
            return chain[::-1]
        parent = reference.parent or layout.default_parent
        if parent in chain:
            raise FreezeError(f"job {name!r}: inheritance cycle: {' -> '.join([*chain, parent])}")
        chain.append(parent)


class _Builder:
    """Applies variants one by one, enforcing final/protected/abstract."""

    def __init__(self, name: str, layout: Layout) -> None:
        self.name = name
        self.layout = layout
        self.secrets: dict[str, dict[str, Any]] = {}
        self.values: dict[str, Any] = {}
        self.applied: list[str] = []
        self.final_by: JobVariant | None = None
        self.protected_by: JobVariant | None = None
        self.abstract = False

    def start_job(self, job: str, first: JobVariant) -> None:
        """A new job of the chain begins (a child of the previous one)."""
        if self.final_by is not None:
            raise _error(
                first, f"job {job!r} may not inherit from final job {self.final_by.name!r}"
            )
        self._check_protected(first, f"job {job!r} may not inherit from protected job")
        self.abstract = False

    def apply(self, variant: JobVariant) -> None:
        if self.final_by is not None:
            changed = sorted(set(variant.attrs) - ALLOWED_AFTER_FINAL)
            if changed:
                raise _error(
                    variant,
                    f"job {variant.name!r} is final; this variant may not change {changed[0]!r}",
                )
        self._check_protected(variant, f"job {variant.name!r} may not modify protected job")
        for key, value in self._with_secrets(variant).items():
            self._set(key, value)
        self.abstract = self.abstract or bool(variant.attrs.get("abstract"))
        if variant.attrs.get("final"):
            self.final_by = variant
        if variant.attrs.get("protected"):
            self.protected_by = variant
        self.applied.append(
            f"{variant.source.project}@{variant.source.branch} {variant.source.where()}"
        )

    def _with_secrets(self, variant: JobVariant) -> dict[str, Any]:
        """The variant's attributes, its playbooks bound to the secrets it names."""
        attrs = dict(variant.attrs)
        used: tuple[JobSecret, ...] = attrs.pop("secrets", ())
        if not used:
            return attrs
        bound = tuple((entry.name, self._secret(variant, entry)) for entry in used)
        passed = tuple(
            pair for pair, entry in zip(bound, used, strict=True) if entry.pass_to_parent
        )
        if passed:
            for key in PLAYBOOK_KEYS:
                if key in self.values:
                    self.values[key] = _bind(self.values[key], passed)
        for key in PLAYBOOK_KEYS:
            if key in attrs:
                attrs[key] = _bind(attrs[key], bound)
        return attrs

    def _secret(self, variant: JobVariant, entry: JobSecret) -> str:
        source = variant.source
        secret = self.layout.secret_for(entry.secret, source.project, source.branch)
        if secret is None:
            raise _error(
                variant,
                f"secret {entry.secret!r} is not defined in project {source.project!r}",
            )
        if not secret.source.trusted:
            self.values["post-review"] = True
        self.secrets[secret.key] = {
            "connection": secret.connection,
            "project": secret.source.project,
            "name": secret.name,
            "data": secret.data,
        }
        return secret.key

    def _check_protected(self, variant: JobVariant, message: str) -> None:
        owner = self.protected_by
        if owner is not None and owner.source.project != variant.source.project:
            raise _error(variant, f"{message} {owner.name!r} of project {owner.source.project!r}")

    def _set(self, key: str, value: Any) -> None:
        old = self.values.get(key)
        if key in OVERRIDE:
            self.values[key] = value
        elif key == "vars":
            self.values[key] = deep_merge(old or {}, value)
        elif key == "pre-run":
            self.values[key] = (*(old or ()), *value)
        elif key == "post-run":
            self.values[key] = (*value, *(old or ()))
        elif key == "required-projects":
            merged = {p.name: p for p in old or ()}
            merged.update({p.name: p for p in value})
            self.values[key] = tuple(merged.values())
        elif key in ("semaphores", "tags", "failure-output", "provides", "requires"):
            self.values[key] = tuple(dict.fromkeys((*(old or ()), *value)))
        elif key == "post-review":
            self.values[key] = bool(old) or bool(value)
        elif key == "allowed-projects":
            self.values[key] = tuple(p for p in value if old is None or p in old)


PLAYBOOK_KEYS = ("pre-run", "run", "post-run")


def _bind(
    playbooks: tuple[Playbook, ...], pairs: tuple[tuple[str, str], ...]
) -> tuple[Playbook, ...]:
    """The playbooks seeing ``pairs`` (alias, secret key) too; a later alias wins."""
    result = []
    for playbook in playbooks:
        seen = dict(playbook.secrets)
        seen.update(pairs)
        result.append(replace(playbook, secrets=tuple(seen.items())))
    return tuple(result)


def _error(variant: JobVariant, message: str, kind: type[FreezeError] = FreezeError) -> FreezeError:
    source = variant.source
    return kind(
        message,
        path=source.path,
        line=source.line,
        subject=variant.origin,
        project=source.project,
        branch=source.branch,
    )


def freeze_job(
    layout: Layout,
    name: str,
    *,
    project: str,
    branch: str,
    pipeline: str,
    entries: Sequence[JobVariant],
) -> FrozenJob | None:
    """Freeze ``name`` with the project pipeline ``entries`` for it.

    Returns None when the job does not run on this branch (no matching
    variant of its own, or no matching project entry).
    """
    entries = [e for e in entries if variant_matches(e, branch)]
    own = [v for v in layout.jobs.get(name, ()) if variant_matches(v, branch)]
    if not entries:
        return None
    chain = inheritance_chain(layout, name)
    if not own:
        return None
    builder = _Builder(name, layout)
    for job in chain:
        matching = [v for v in layout.jobs[job] if variant_matches(v, branch)]
        if matching:
            builder.start_job(job, matching[0])
        for variant in matching:
            builder.apply(variant)
    for entry in entries:
        builder.apply(entry)
    if builder.abstract:
        raise _error(entries[0], f"job {name!r} is abstract and may not be run directly")
    frozen = _frozen(layout, builder, chain, project=project, branch=branch, pipeline=pipeline)
    _check_may_run(layout, frozen, entries[0])
    return frozen


def _check_may_run(layout: Layout, job: FrozenJob, entry: JobVariant) -> None:
    """Zuul's post-review and allowed-projects rules, for this pipeline and project."""
    where = layout.pipelines.get(job.pipeline)
    if job.post_review and where is not None and not where.post_review:
        raise _error(
            entry,
            f"pre-review pipeline {job.pipeline!r} does not allow post-review job {job.name!r} "
            "(it uses a secret of an untrusted project, or sets post-review)",
            NotPermittedError,
        )
    if job.allowed_projects is not None and job.project not in job.allowed_projects:
        raise _error(
            entry,
            f"project {job.project!r} is not allowed to run job {job.name!r}",
            NotPermittedError,
        )


def _frozen(
    layout: Layout, builder: _Builder, chain: list[str], *, project: str, branch: str, pipeline: str
) -> FrozenJob:
    v = builder.values
    timeout = v.get("timeout", layout.max_job_timeout)
    return FrozenJob(
        name=builder.name,
        project=project,
        branch=branch,
        pipeline=pipeline,
        parent=chain[-2] if len(chain) > 1 else None,
        variants=tuple(builder.applied),
        description=v.get("description", ""),
        voting=v.get("voting", True),
        timeout=timeout,
        post_timeout=v.get("post-timeout"),
        attempts=v.get("attempts", DEFAULT_ATTEMPTS),
        pre_run=v.get("pre-run", ()),
        run=v.get("run", ()),
        post_run=v.get("post-run", ()),
        vars=v.get("vars", {}),
        required_projects=v.get("required-projects", ()),
        dependencies=v.get("dependencies", ()),
        semaphores=tuple(_semaphore(layout, s) for s in v.get("semaphores", ())),
        nodeset=v.get("nodeset"),
        tags=v.get("tags", ()),
        files=v.get("files", ()),
        irrelevant_files=v.get("irrelevant-files", ()),
        zone=v.get("zone", ""),
        secrets=dict(builder.secrets),
        post_review=v.get("post-review", False),
        allowed_projects=v.get("allowed-projects"),
        failure_output=v.get("failure-output", ()),
        provides=v.get("provides", ()),
        requires=v.get("requires", ()),
    )


def _semaphore(layout: Layout, name: str) -> Semaphore:
    semaphore = layout.semaphore(name)
    return Semaphore(semaphore.name, semaphore.max)
