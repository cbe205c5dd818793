"""A build request's params: the frozen job as it was frozen, and its build's context.

A job has one form from freezing to the executor: the
:class:`~scheduler.config.freeze.FrozenJob`, and its own plain form
(``FrozenJob.to_dict``). The scheduler stores that plain form with the
buildset (``JobInfo.spec``) and writes it into the build request as it is,
without reading it back; the executor reads it with ``FrozenJob.from_dict``
and holds a job equal to the one frozen. What only the pipeline knows,
per build, travels beside it as a small record, :class:`BuildContext`:
the tenant, the ref, the build's uuid, the repo state the merger made, the
commits the merge moved (trusted steps run from those), where each
project's commits are, the parent data, the hold, the merge to make again
elsewhere and the build's nodes.

Why not a spec of its own (schema 1 had one: the job's fields copied into
a flat record, its playbooks into steps): each copy was a conversion to
keep in step with the frozen job, and the scheduler parsed the job only to
write it again. Now the scheduler copies nothing and the executor decides
what the two make together (:mod:`workers.executor.job`: the steps with
their commits, the checkouts, the checks); this module is data and its
(de)serialisation only, no I/O and no policy.

``to_dict``/``from_dict`` are the persistence contract: ``{"schema": 3,
"job": <FrozenJob.to_dict()>, "context": <BuildContext.to_dict()>}``.
``from_dict`` checks every field of the context and raises
:class:`BuildSpecError` naming it; it ignores unknown keys, so a newer
scheduler may add optional fields. A request of schema 1 (the flat spec of
an older scheduler) is refused with an error that says so; an executor of
that version refuses this one the same way (``unsupported schema 3``), so
during an upgrade such a build ends ``ERROR`` with that message rather than
crash a worker. ``{"invalid": why}`` is what a scheduler writes when it
cannot make the params: it is refused with ``why``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from scheduler.config.freeze import FROZEN_SCHEMA, FrozenJob
from scheduler.errors import SluiceError


class BuildSpecError(SluiceError):
    """A build request's params (or their JSON form) are malformed."""


# The params' schema; a stored object's schema too (scheduler.zk.stored: 3).
SPEC_SCHEMA = 3
# The flat spec, one record copying the job's fields (before SPEC_SCHEMA 3).
FLAT_SPEC_SCHEMA = 1

# A build uuid becomes a folder name: keep it to a safe alphabet.
_UUID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
# A full SHA-1 or SHA-256 object id, lower case (what git prints).
_COMMIT_PATTERN = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")

JsonObject = Mapping[str, Any]
RepoState = Mapping[str, Mapping[str, str]]


@dataclass(frozen=True)
class BuildContext:
    """What one build adds to its frozen job: what the pipeline knows, the job does not.

    ``repo_state`` maps each project the job uses to ``{branch: commit}``
    (the item's merge); every project in it is checked out. ``sources``
    maps each of them to where its git objects can be fetched: a local path
    (the merger's repo cache: objects are shared, no copy) or a URL (the
    connection's baseurl: the exact commits are fetched).

    ``base_state`` is ``{project: {branch: commit}}`` for the branches the
    item's merge moved: the commit each had before the speculative changes
    (a trusted step runs from it, never from the merge).

    ``parent_data`` is the result data of the jobs this one depends on,
    already merged by the scheduler; ``artifacts`` what the job finds in
    ``zuul.artifacts`` (:mod:`scheduler.manager.requirements`).

    ``merge_request`` (the uuid of the item's merge request in the merger
    queue) and ``connections`` (``{project: connection}``) let an executor
    without the merger's repo cache make the repo state again (merges are
    deterministic; :mod:`workers.executor.speculation`).

    ``node_request`` and ``nodes`` (``[{name, id, label, host, connection}]``
    in the nodeset's order) are the job's nodes, served by a launcher: the
    executor accepts the request before the build and returns the nodes
    after it.
    """

    tenant: str
    build_uuid: str
    repo_state: RepoState
    sources: Mapping[str, str]
    ref: str = ""
    base_state: RepoState = field(default_factory=dict)
    parent_data: JsonObject = field(default_factory=dict)
    # Keep the workspace if the build fails (an autohold); logs are always kept.
    hold: bool = False
    merge_request: str = ""
    connections: Mapping[str, str] = field(default_factory=dict)
    node_request: str = ""
    nodes: tuple[Mapping[str, Any], ...] = ()
    # Zuul's zuul.artifacts: {name, url, project, change, patchset, job, metadata}
    artifacts: tuple[Mapping[str, Any], ...] = ()

    def __post_init__(self) -> None:
        _validate(self)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (``json.dumps`` works on it as is); empty optional fields left out."""
        data: dict[str, Any] = {
            "tenant": self.tenant,
            "build_uuid": self.build_uuid,
            "ref": self.ref,
            "repo_state": _plain(self.repo_state),
            "sources": dict(self.sources),
        }
        optional: dict[str, Any] = {
            "base_state": _plain(self.base_state),
            "parent_data": _plain(self.parent_data),
            "hold": self.hold,
            "merge_request": self.merge_request,
            "connections": dict(self.connections),
            "node_request": self.node_request,
            "nodes": [_plain(n) for n in self.nodes],
            "artifacts": [_plain(a) for a in self.artifacts],
        }
        data.update({key: value for key, value in optional.items() if value})
        return data

    @classmethod
    def from_dict(cls, data: Any) -> BuildContext:
        if not isinstance(data, Mapping):
            raise BuildSpecError(f"build spec: context: expected an object, got {_kind(data)}")
        reader = _Reader(data)
        return cls(
            tenant=reader.text("tenant"),
            build_uuid=reader.text("build_uuid"),
            ref=reader.text("ref", ""),
            repo_state=reader.repo_state("repo_state", required=True),
            sources=reader.text_map("sources"),
            base_state=reader.repo_state("base_state"),
            parent_data=reader.json_object("parent_data"),
            hold=reader.flag("hold"),
            merge_request=reader.text("merge_request", ""),
            connections=reader.text_map("connections"),
            node_request=reader.text("node_request", ""),
            nodes=reader.nodes(),
            artifacts=reader.artifacts(),
        )


@dataclass(frozen=True)
class BuildSpec:
    """One build of one job for one pipeline item: the build request's params as read."""

    job: FrozenJob
    context: BuildContext

    def to_dict(self) -> dict[str, Any]:
        return request_params(self.job.to_dict(), self.context)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> BuildSpec:
        """Read params written by :func:`request_params` (see the module docstring)."""
        if not isinstance(data, Mapping):
            raise BuildSpecError(f"build spec: expected an object, got {_kind(data)}")
        if "invalid" in data:
            raise BuildSpecError(f"build spec: the scheduler could not make it: {data['invalid']}")
        schema = data.get("schema")
        if schema == FLAT_SPEC_SCHEMA:
            raise BuildSpecError(
                f"build spec: schema {schema} (a flat spec, written by a scheduler older than "
                f"this executor) is no longer read; this executor reads schema {SPEC_SCHEMA}"
            )
        if schema != SPEC_SCHEMA:
            raise BuildSpecError(f"build spec: unsupported schema {schema!r}")
        return cls(_job(data.get("job")), BuildContext.from_dict(data.get("context")))

    @classmethod
    def from_json(cls, text: str) -> BuildSpec:
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise BuildSpecError(f"build spec: invalid JSON: {exc}") from None
        return cls.from_dict(data)


def request_params(job: Mapping[str, Any], context: BuildContext) -> dict[str, Any]:
    """The params of a build request: ``job``, a frozen job's plain form, as it is."""
    return {"schema": SPEC_SCHEMA, "job": dict(job), "context": context.to_dict()}


def _job(data: Any) -> FrozenJob:
    if not isinstance(data, Mapping):
        raise BuildSpecError(f"build spec: job: expected an object, got {_kind(data)}")
    schema = data.get("schema", FROZEN_SCHEMA)
    if not isinstance(schema, int) or not 1 <= schema <= FROZEN_SCHEMA:
        raise BuildSpecError(f"build spec: job: unsupported schema {schema!r}")
    try:
        job = FrozenJob.from_dict(data)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise BuildSpecError(f"build spec: job: not a frozen job ({exc!r})") from None
    for name in ("name", "project", "branch", "pipeline"):
        if not isinstance(getattr(job, name), str) or not getattr(job, name):
            raise BuildSpecError(f"build spec: job: {name} must be a non-empty string")
    return job


def _kind(value: Any) -> str:
    return type(value).__name__


class _Reader:
    """Typed access to the fields of a context dict, errors naming the field."""

    def __init__(self, data: Mapping[str, Any]) -> None:
        self.data = data

    def error(self, key: str, expected: str) -> BuildSpecError:
        return BuildSpecError(
            f"build spec: {key}: expected {expected}, got {_kind(self.data.get(key))}"
        )

    def text(self, key: str, default: str | None = None) -> str:
        value = self.data.get(key, default)
        if not isinstance(value, str):
            raise self.error(key, "a string")
        return value

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

    def repo_state(self, key: str, *, required: bool = False) -> dict[str, dict[str, str]]:
        value = self.data.get(key, None if required else {})
        if not isinstance(value, Mapping):
            raise self.error(key, "an object {project: {branch: commit}}")
        state: dict[str, dict[str, str]] = {}
        for project, branches in value.items():
            if not isinstance(branches, Mapping) or not all(
                isinstance(b, str) and isinstance(c, str) for b, c in branches.items()
            ):
                raise BuildSpecError(f"build spec: {key}.{project}: expected {{branch: commit}}")
            state[str(project)] = dict(branches)
        return state

    def nodes(self) -> tuple[Mapping[str, Any], ...]:
        value = self.data.get("nodes", [])
        if not isinstance(value, list | tuple) or not all(
            isinstance(n, Mapping) and isinstance(n.get("id"), str) for n in value
        ):
            raise self.error("nodes", "a list of {name, id, label, host, connection} objects")
        return tuple(dict(n) for n in value)

    def artifacts(self) -> tuple[Mapping[str, Any], ...]:
        value = self.data.get("artifacts", [])
        if not isinstance(value, list | tuple) or not all(
            isinstance(a, Mapping) and all(isinstance(a.get(k), str) for k in ("name", "url"))
            for a in value
        ):
            raise self.error("artifacts", "a list of {name, url, ...} objects")
        return tuple(dict(a) for a in value)


def _plain(value: Any) -> Any:
    """A deep copy of JSON data with mappings and sequences made dicts and lists."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _validate(context: BuildContext) -> None:
    """What the fields must be together; each field's type is checked on reading."""
    for name in ("tenant", "build_uuid"):
        if not getattr(context, name):
            raise BuildSpecError(f"build spec: {name} must not be empty")
    if not _UUID_PATTERN.fullmatch(context.build_uuid):
        raise BuildSpecError(f"build spec: build_uuid {context.build_uuid!r} is not a safe name")
    for key in ("repo_state", "base_state"):
        for project, branches in getattr(context, key).items():
            _check_project_name(project)
            for branch, commit in branches.items():
                if not _COMMIT_PATTERN.fullmatch(commit) or not commit.strip("0"):
                    raise BuildSpecError(
                        f"build spec: {key}.{project}.{branch}: {commit!r} is not a commit id"
                    )
    missing = sorted(set(context.repo_state) - set(context.sources))
    if missing:
        raise BuildSpecError(f"build spec: sources: no source for {', '.join(missing)}")
    try:
        json.dumps(context.parent_data)
    except (TypeError, ValueError) as exc:
        raise BuildSpecError(f"build spec: parent_data is not JSON: {exc}") from None
    try:
        json.dumps(context.artifacts)
    except (TypeError, ValueError) as exc:
        raise BuildSpecError(f"build spec: artifacts are not JSON: {exc}") from None


def _check_project_name(name: str) -> None:
    """Refuse a project name that cannot be a relative folder (``..``, ``/x``)."""
    parts = name.split("/")
    if not name or "\0" in name or any(p in ("", ".", "..") for p in parts):
        raise BuildSpecError(f"build spec: project name {name!r} is not a safe relative path")
