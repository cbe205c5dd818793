"""What a build needs to run: the :class:`BuildSpec`.

The spec is the whole input of :func:`workers.executor.runner.run_build`: a
frozen, JSON-serializable dataclass that the scheduler writes into the
build request's ``params`` in ZooKeeper and the executor reads back. It
carries no secrets yet and no ZooKeeper paths, only plain data.

``to_dict``/``from_dict`` are the persistence contract. ``from_dict``
validates every field and raises :class:`BuildSpecError` naming the field;
it accepts the fields of schema 1 (the only schema so far) and ignores
unknown keys, so a newer scheduler may add optional fields without breaking
an older executor during an upgrade.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from scheduler.errors import SluiceError


class BuildSpecError(SluiceError):
    """A build spec (or its JSON form) is malformed."""


SPEC_SCHEMA = 1

# A build uuid becomes a folder name: keep it to a safe alphabet.
_UUID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
# A full SHA-1 or SHA-256 object id, lower case (what git prints).
_COMMIT_PATTERN = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")

JsonObject = Mapping[str, Any]


@dataclass(frozen=True)
class JobStep:
    """One executable of a phase: a path in a project's repository at a branch.

    ``project`` and ``branch`` say where the job's variant that named the
    executable lives (the ``Playbook`` of a frozen job); ``None`` means the
    change's project and the branch checked out for it. A step of another
    project, or of another branch than the one checked out, is run from a
    checkout of its own (``content/`` in the workspace); its project and
    branch must be in the repo state.
    """

    path: str
    project: str | None = None
    branch: str | None = None
    # run from this commit of the branch, not from the repo state's: a trusted
    # (config-project) step whose branch the item's merge moved runs from the
    # branch as it was before the speculative changes
    commit: str | None = None
    # (name the step sees it under, key in BuildSpec.secrets)
    secrets: tuple[tuple[str, str], ...] = ()
    # named by a config project: it runs from a copy no other step of the
    # build can write (as does every step with secrets; docs/security.md)
    trusted: bool = False

    @property
    def protected(self) -> bool:
        """Whether the step runs from a read-only copy: trusted, or holding a secret."""
        return self.trusted or bool(self.secrets)

    def to_json_value(self) -> str | dict[str, Any]:
        """A plain path when it has nothing else, else an object."""
        if (self.project, self.branch, self.commit, self.secrets, self.trusted) == (
            None,
            None,
            None,
            (),
            False,
        ):
            return self.path
        value: dict[str, Any] = {"path": self.path}
        if self.trusted:
            value["trusted"] = True
        if self.secrets:
            value["secrets"] = dict(self.secrets)
        if self.project is not None:
            value["project"] = self.project
        if self.branch is not None:
            value["branch"] = self.branch
        if self.commit is not None:
            value["commit"] = self.commit
        return value

    @classmethod
    def of(cls, value: str | JobStep) -> JobStep:
        return value if isinstance(value, JobStep) else cls(value)


StepLike = str | JobStep


@dataclass(frozen=True)
class BuildSpec:
    """One build of one job for one pipeline item.

    ``pre_run``/``run``/``post_run`` are the frozen job's phases (already
    flattened through inheritance): paths of executables relative to the
    checkout of ``project``, or :class:`JobStep` values naming the project
    and branch that hold them; :meth:`steps` gives them all as ``JobStep``.
    ``timeout`` bounds pre-run and run together, and ``post_timeout`` bounds
    each post-run executable (Zuul's semantics); both are seconds, ``None``
    means unbounded.

    ``repo_state`` maps each project to ``{branch: commit}`` (from the
    merger); every project in it is checked out in the workspace. ``sources``
    maps each project to where its git objects can be fetched: a local path
    (the merger's repo cache: objects are shared, no copy) or a URL (the
    connection's baseurl: the exact commits are fetched). ``checkouts`` may
    name the branch to check out for a project (Zuul's override-checkout);
    otherwise the change's ``branch`` is used where the project has it, then
    the project's only branch.

    ``parent_data`` is the result data of the jobs this one depends on,
    already merged by the scheduler; it is given to the job under its own
    ``vars`` (job vars win), as Zuul does.

    ``speculation`` says where the merge that made the repo state is
    recorded, so an executor without the merger's repo cache can make it
    again (merges are deterministic): ``{"merge_request": uuid of the
    item's merge request in the merger queue, "connections": {project:
    connection}}`` (:mod:`workers.executor.speculation`).

    ``secrets`` maps a secret's key to ``{connection, project, name, data}``
    with ``data`` still encrypted (only the executor holds the keystore
    password); each step's ``secrets`` says which it sees, under what name.
    """

    tenant: str
    pipeline: str
    project: str
    branch: str
    ref: str
    job: str
    build_uuid: str
    run: tuple[StepLike, ...]
    repo_state: Mapping[str, Mapping[str, str]]
    sources: Mapping[str, str]
    pre_run: tuple[StepLike, ...] = ()
    post_run: tuple[StepLike, ...] = ()
    timeout: float | None = None
    post_timeout: float | None = None
    vars: JsonObject = field(default_factory=dict)
    parent_data: JsonObject = field(default_factory=dict)
    checkouts: Mapping[str, str] = field(default_factory=dict)
    # Keep the workspace if the build fails (an autohold); logs are always kept.
    hold: bool = False
    secrets: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    speculation: Mapping[str, Any] = field(default_factory=dict)
    # the job's nodes (a nodeset served by a launcher): the executor accepts
    # ``node_request`` before the build and returns the nodes after it;
    # ``nodes`` are [{name, id, label, host, connection}] in the nodeset's order
    node_request: str = ""
    nodes: tuple[Mapping[str, Any], ...] = ()

    def __post_init__(self) -> None:
        _validate(self)

    def steps(self, phase: str) -> tuple[JobStep, ...]:
        """The steps of ``phase`` (``pre-run``, ``run`` or ``post-run``)."""
        steps = {"pre-run": self.pre_run, "run": self.run, "post-run": self.post_run}[phase]
        return tuple(JobStep.of(step) for step in steps)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (``json.dumps`` works on it as is)."""
        return {
            "schema": SPEC_SCHEMA,
            "tenant": self.tenant,
            "pipeline": self.pipeline,
            "project": self.project,
            "branch": self.branch,
            "ref": self.ref,
            "job": self.job,
            "build_uuid": self.build_uuid,
            "pre_run": [JobStep.of(s).to_json_value() for s in self.pre_run],
            "run": [JobStep.of(s).to_json_value() for s in self.run],
            "post_run": [JobStep.of(s).to_json_value() for s in self.post_run],
            "timeout": self.timeout,
            "post_timeout": self.post_timeout,
            "vars": _plain(self.vars),
            "parent_data": _plain(self.parent_data),
            "repo_state": {p: dict(b) for p, b in self.repo_state.items()},
            "sources": dict(self.sources),
            "checkouts": dict(self.checkouts),
            "hold": self.hold,
            "secrets": _plain(self.secrets),
            "speculation": _plain(self.speculation),
            **({"node_request": self.node_request} if self.node_request else {}),
            **({"nodes": [_plain(n) for n in self.nodes]} if self.nodes else {}),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> BuildSpec:
        """Read a spec written by :meth:`to_dict` (any schema up to ours)."""
        if not isinstance(data, Mapping):
            raise BuildSpecError(f"build spec: expected an object, got {type(data).__name__}")
        schema = data.get("schema", SPEC_SCHEMA)
        if not isinstance(schema, int) or schema > SPEC_SCHEMA or schema < 1:
            raise BuildSpecError(f"build spec: unsupported schema {schema!r}")
        reader = _SpecReader(data)
        return cls(
            tenant=reader.text("tenant"),
            pipeline=reader.text("pipeline"),
            project=reader.text("project"),
            branch=reader.text("branch"),
            ref=reader.text("ref", ""),
            job=reader.text("job"),
            build_uuid=reader.text("build_uuid"),
            pre_run=reader.steps("pre_run"),
            run=reader.steps("run"),
            post_run=reader.steps("post_run"),
            timeout=reader.seconds("timeout"),
            post_timeout=reader.seconds("post_timeout"),
            vars=reader.json_object("vars"),
            parent_data=reader.json_object("parent_data"),
            repo_state=reader.repo_state(),
            sources=reader.text_map("sources"),
            checkouts=reader.text_map("checkouts"),
            hold=reader.flag("hold"),
            secrets=reader.json_object("secrets"),
            speculation=reader.json_object("speculation"),
            node_request=reader.text("node_request", ""),
            nodes=reader.nodes(),
        )

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> BuildSpec:
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise BuildSpecError(f"build spec: invalid JSON: {exc}") from None
        return cls.from_dict(data)


class _SpecReader:
    """Typed access to the fields of a spec dict, errors naming the field."""

    def __init__(self, data: Mapping[str, Any]) -> None:
        self.data = data

    def error(self, key: str, expected: str) -> BuildSpecError:
        got = type(self.data.get(key)).__name__
        return BuildSpecError(f"build spec: {key}: expected {expected}, got {got}")

    def text(self, key: str, default: str | None = None) -> str:
        value = self.data.get(key, default)
        if not isinstance(value, str):
            raise self.error(key, "a string")
        return value

    def nodes(self) -> tuple[Mapping[str, Any], ...]:
        value = self.data.get("nodes", [])
        if not isinstance(value, list | tuple) or not all(
            isinstance(n, Mapping) and isinstance(n.get("id"), str) for n in value
        ):
            raise self.error("nodes", "a list of {name, id, label, host, connection} objects")
        return tuple(dict(n) for n in value)

    def steps(self, key: str) -> tuple[StepLike, ...]:
        value = self.data.get(key, [])
        if not isinstance(value, list | tuple):
            raise self.error(key, "a list of paths or {path, project, branch} objects")
        return tuple(self._step(key, item) for item in value)

    def _step(self, key: str, item: Any) -> StepLike:
        if isinstance(item, str):
            return item
        fields = ("path", "project", "branch", "commit")
        secrets = item.get("secrets", {}) if isinstance(item, Mapping) else None
        if (
            not isinstance(item, Mapping)
            or not isinstance(item.get("path"), str)
            or not all(isinstance(item.get(f), str | None) for f in fields)
            or not isinstance(secrets, Mapping)
            or not all(isinstance(k, str) and isinstance(v, str) for k, v in secrets.items())
            or not isinstance(item.get("trusted", False), bool)
        ):
            raise BuildSpecError(
                f"build spec: {key}: expected a path or {{path, project, branch}}, got {item!r}"
            )
        return JobStep(
            item["path"],
            item.get("project"),
            item.get("branch"),
            item.get("commit"),
            tuple(secrets.items()),
            item.get("trusted", False),
        )

    def seconds(self, key: str) -> float | None:
        value = self.data.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.error(key, "a number of seconds or null")
        return float(value)

    def flag(self, key: str) -> bool:
        value = self.data.get(key, False)
        if not isinstance(value, bool):
            raise self.error(key, "true/false")
        return value

    def json_object(self, key: str) -> dict[str, Any]:
        value = self.data.get(key, {})
        if not isinstance(value, Mapping):
            raise self.error(key, "an object")
        return dict(value)

    def text_map(self, key: str) -> dict[str, str]:
        value = self.data.get(key, {})
        if not isinstance(value, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()
        ):
            raise self.error(key, "an object of strings")
        return dict(value)

    def repo_state(self) -> dict[str, dict[str, str]]:
        value = self.data.get("repo_state")
        if not isinstance(value, Mapping):
            raise self.error("repo_state", "an object {project: {branch: commit}}")
        state: dict[str, dict[str, str]] = {}
        for project, branches in value.items():
            if not isinstance(branches, Mapping) or not all(
                isinstance(b, str) and isinstance(c, str) for b, c in branches.items()
            ):
                raise BuildSpecError(
                    f"build spec: repo_state.{project}: expected {{branch: commit}}"
                )
            state[str(project)] = dict(branches)
        return state


def _plain(value: Any) -> Any:
    """A deep copy of JSON data with mappings and sequences made dicts and lists."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _validate(spec: BuildSpec) -> None:
    """Checks that need several fields; single fields are checked on reading."""
    for name in ("tenant", "pipeline", "project", "branch", "job", "build_uuid"):
        if not getattr(spec, name):
            raise BuildSpecError(f"build spec: {name} must not be empty")
    if not _UUID_PATTERN.fullmatch(spec.build_uuid):
        raise BuildSpecError(f"build spec: build_uuid {spec.build_uuid!r} is not a safe name")
    for project, branches in spec.repo_state.items():
        check_project_name(project)
        for branch, commit in branches.items():
            if not _COMMIT_PATTERN.fullmatch(commit) or not commit.strip("0"):
                raise BuildSpecError(
                    f"build spec: repo_state.{project}.{branch}: {commit!r} is not a commit id"
                )
    _validate_secrets(spec)
    if spec.project not in spec.repo_state:
        raise BuildSpecError(f"build spec: repo_state has no entry for {spec.project!r}")
    missing = sorted(set(spec.repo_state) - set(spec.sources))
    if missing:
        raise BuildSpecError(f"build spec: sources: no source for {', '.join(missing)}")
    for key in ("timeout", "post_timeout"):
        value = getattr(spec, key)
        if value is not None and value <= 0:
            raise BuildSpecError(f"build spec: {key} must be positive, got {value}")
    try:
        json.dumps({"vars": spec.vars, "parent_data": spec.parent_data})
    except (TypeError, ValueError) as exc:
        raise BuildSpecError(f"build spec: vars/parent_data are not JSON: {exc}") from None


def _validate_secrets(spec: BuildSpec) -> None:
    for phase in ("pre-run", "run", "post-run"):
        for step in spec.steps(phase):
            unknown = sorted(key for _, key in step.secrets if key not in spec.secrets)
            if unknown:
                raise BuildSpecError(f"build spec: {phase} {step.path}: no secret {unknown[0]!r}")


def check_project_name(name: str) -> None:
    """Refuse a project name that cannot be a relative folder (``..``, ``/x``)."""
    parts = name.split("/")
    if not name or "\0" in name or any(p in ("", ".", "..") for p in parts):
        raise BuildSpecError(f"build spec: project name {name!r} is not a safe relative path")
