"""The merger's jobs and results: frozen dataclasses that travel as JSON.

Every job and result is a frozen dataclass with ``to_dict()`` (JSON-ready:
only dicts, lists, strings, numbers, booleans and None) and
``from_dict()``. ``from_dict`` ignores keys it does not know and fills
missing keys with their defaults, so mergers and schedulers of neighbouring
versions read each other's records; ``SCHEMA`` is bumped when a field
changes meaning, never silently.

Names follow the engine's vocabulary: a *change* is a ref or commit of one
project that targets one branch; a *project state* maps every branch of a
project to a commit; *config files* are the Zuul/Sluice YAML files of one
project-branch, path -> text.

A merge request in ZooKeeper (the merger queue of :mod:`scheduler.stores.job_requests`)
carries, in this format:

* **params** ``{"kind": <JobKind>, "job": <the job's to_dict()>}``
  (:func:`request_params`, read back with :func:`read_params`);
* **the request node** (built by
  :func:`scheduler.stores.merge_requests.new_request`): ``job_name`` is the
  job's ``job_id`` and ``info`` is ``{"kind": <JobKind>}`` (so the result
  event names the job, and a lost request still tells what it was);
* **result data** the result's ``to_dict()`` plus ``"kind"``
  (:func:`result_data`); a request the sweep found lost holds
  ``{"result": "LOST"}`` instead. :func:`decode_result` turns either into a
  typed result: a lost one is ``failed`` with a failure of kind ``lost``
  (the merge should be redone).

This module is the scheduler's and the workers' common ground: it imports
nothing of ``workers/`` and does no I/O (``docs/merger.md``).
"""

from __future__ import annotations

import dataclasses
import enum
import types
import typing
from collections.abc import Mapping
from typing import Any, ClassVar, Self, Union

from scheduler.errors import SluiceError

SCHEMA = 1


class InvalidRecordError(SluiceError, ValueError):
    """Data that is not a valid record of this format (a job, a result, request params)."""

    kind = "invalid"


class MergeMode(enum.StrEnum):
    """How a change is applied on top of its branch (Zuul's merge modes)."""

    MERGE = "merge"
    MERGE_RESOLVE = "merge-resolve"
    SQUASH_MERGE = "squash-merge"
    CHERRY_PICK = "cherry-pick"
    REBASE = "rebase"


class Status(enum.StrEnum):
    """Outcome of a job: merged (or done), a merge conflict, or a failure."""

    OK = "ok"
    CONFLICT = "conflict"
    FAILED = "failed"


class Record:
    """Mixin for frozen dataclasses: JSON-ready ``to_dict`` / ``from_dict``."""

    __dataclass_fields__: ClassVar[dict[str, dataclasses.Field[Any]]]

    def to_dict(self) -> dict[str, Any]:
        return {f.name: _dump(getattr(self, f.name)) for f in dataclasses.fields(self)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Self:
        """Build from ``to_dict()`` output; malformed data raises :class:`InvalidRecordError`."""
        try:
            kwargs = {name: _load(hint, data[name]) for name, hint in _fields(cls) if name in data}
            return cls(**kwargs)
        except InvalidRecordError:
            raise
        except (AttributeError, KeyError, TypeError, ValueError, StopIteration) as exc:
            raise InvalidRecordError(f"malformed {cls.__name__}: {exc!r}") from None


def _fields(cls: type[Record]) -> tuple[tuple[str, Any], ...]:
    """Each field's name and type, resolved once per class.

    ``typing.get_type_hints`` evaluates every string annotation anew on each
    call: it was an eighth of a pipeline pass that applies a merge result.
    """
    fields = _FIELDS.get(cls)
    if fields is None:
        hints = typing.get_type_hints(cls)
        fields = _FIELDS[cls] = tuple((f.name, hints[f.name]) for f in dataclasses.fields(cls))
    return fields


_FIELDS: dict[type[Record], tuple[tuple[str, Any], ...]] = {}


def _dump(value: Any) -> Any:
    if isinstance(value, Record):
        return value.to_dict()
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, tuple | list):
        return [_dump(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _dump(v) for k, v in value.items()}
    return value


def _load(hint: Any, value: Any) -> Any:  # noqa: PLR0911 (one return per shape)
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (Union, types.UnionType):
        if value is None:
            return None
        return _load(next(a for a in args if a is not type(None)), value)
    if origin is tuple:
        return tuple(_load(args[0], v) for v in value)
    if origin is list:
        return [_load(args[0], v) for v in value]
    if origin is dict:
        return {k: _load(args[1], v) for k, v in value.items()}
    if isinstance(hint, type) and issubclass(hint, Record):
        return hint.from_dict(value)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return hint(value)
    if hint in (str, int, bool) and not isinstance(value, hint):
        raise TypeError(f"expected {hint.__name__}, got {type(value).__name__}")
    return value


# --------------------------------------------------------------------------
# Inputs


@dataclasses.dataclass(frozen=True)
class MergeChange(Record):
    """One change to apply: ``ref`` (fetched from the remote), ``commit``, or both.

    With both, the ref is fetched and ``commit`` is what gets applied (a
    patchset pinned by the scheduler). ``change_id`` is how results name it
    (e.g. ``"42,3"``); it defaults to the ref or the commit.
    """

    connection: str
    project: str
    branch: str
    ref: str = ""
    commit: str = ""
    merge_mode: MergeMode = MergeMode.MERGE
    change_id: str = ""

    @property
    def name(self) -> str:
        return self.change_id or self.ref or self.commit

    @property
    def rev(self) -> str:
        """What the change's ref or commit is called in messages."""
        return self.commit or self.ref


@dataclasses.dataclass(frozen=True)
class ProjectRef(Record):
    """A project by connection and name (a required project of a job)."""

    connection: str
    project: str


@dataclasses.dataclass(frozen=True)
class ProjectState(Record):
    """Branch name -> commit for one project (the repo state of seed 000)."""

    connection: str
    project: str
    branches: dict[str, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class MergeJob(Record):
    """A speculative merge: apply ``changes`` in order, each on its branch.

    ``required`` projects are reported in the repo state even if no change
    touches them. ``base_state`` pins branch heads (e.g. the state an earlier
    merge saw), so a later re-run produces the same commits; branches not
    pinned start from the remote's current head. ``timestamp`` (Unix seconds)
    dates every commit the merge creates; without it, each commit takes the
    committer date of the change it applies, so the output depends only on
    the input.
    """

    job_id: str
    changes: tuple[MergeChange, ...]
    required: tuple[ProjectRef, ...] = ()
    base_state: tuple[ProjectState, ...] = ()
    timestamp: int | None = None
    read_config: bool = True
    schema: int = SCHEMA


@dataclasses.dataclass(frozen=True)
class FilesChangesJob(Record):
    """List the files a change touches against the merge-base with its branch."""

    job_id: str
    change: MergeChange
    schema: int = SCHEMA


@dataclasses.dataclass(frozen=True)
class ConfigJob(Record):
    """Read config files at branch heads; no ``branches`` means every branch."""

    job_id: str
    connection: str
    project: str
    branches: tuple[str, ...] = ()
    schema: int = SCHEMA


@dataclasses.dataclass(frozen=True)
class BranchHeadsJob(Record):
    """Report the head commit of every branch of a project."""

    job_id: str
    connection: str
    project: str
    schema: int = SCHEMA


# --------------------------------------------------------------------------
# Results


@dataclasses.dataclass(frozen=True)
class Failure(Record):
    """Why a job did not succeed, naming the project, the ref and the change.

    ``kind`` is a conflict (``files`` lists the conflicting paths), one of
    the merger's error kinds (``unreachable``, ``unknown-ref``, ``corrupt``,
    ``invalid``, ``lock-timeout``, ... : ``docs/merger.md``), ``internal``
    (a bug in the merger, logged there with its traceback) or :data:`LOST`
    (the merger died; redo the merge).
    """

    kind: str
    message: str
    connection: str = ""
    project: str = ""
    ref: str = ""
    change_index: int | None = None
    change_id: str = ""
    files: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class ChangeResult(Record):
    """What applying one change produced.

    ``commit`` is the change's own commit, ``merged_commit`` the speculative
    state of its branch after it (kept in the merger's cache under
    ``merged_ref``, a memo ref, while a job that wrote or holds it is among
    the repo's last: read it by commit, not by ref), ``files`` what the
    change touches against its branch's merge-base.
    """

    index: int
    change_id: str
    connection: str
    project: str
    branch: str
    commit: str
    merged_commit: str
    merged_ref: str
    files: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class ConfigFiles(Record):
    """Config files (path -> text) of one project-branch at ``commit``."""

    connection: str
    project: str
    branch: str
    commit: str
    files: dict[str, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class MergeResult(Record):
    """The speculative state, or the reason there is none.

    ``repo_state`` has every branch of every project touched or required,
    with speculative commits on the branches the changes target; ``config``
    the config files of each touched project-branch from the merged tree.
    On a conflict, ``changes`` holds the changes applied before it.
    """

    job_id: str
    status: Status
    repo_state: tuple[ProjectState, ...] = ()
    changes: tuple[ChangeResult, ...] = ()
    config: tuple[ConfigFiles, ...] = ()
    failure: Failure | None = None
    # each branch the changes moved, at the commit it had before them
    bases: tuple[ProjectState, ...] = ()
    schema: int = SCHEMA

    @property
    def ok(self) -> bool:
        return self.status is Status.OK

    def commit_of(self, connection: str, project: str, branch: str) -> str:
        """The speculative commit of a project-branch ('' when absent)."""
        for state in self.repo_state:
            if (state.connection, state.project) == (connection, project):
                return state.branches.get(branch, "")
        return ""


@dataclasses.dataclass(frozen=True)
class FilesChangesResult(Record):
    job_id: str
    status: Status
    files: tuple[str, ...] = ()
    failure: Failure | None = None
    schema: int = SCHEMA


@dataclasses.dataclass(frozen=True)
class ConfigResult(Record):
    job_id: str
    status: Status
    config: tuple[ConfigFiles, ...] = ()
    failure: Failure | None = None
    schema: int = SCHEMA


@dataclasses.dataclass(frozen=True)
class BranchHeadsResult(Record):
    job_id: str
    status: Status
    state: ProjectState | None = None
    failure: Failure | None = None
    # the repository's default branch (its HEAD), "" if unknown
    default_branch: str = ""
    schema: int = SCHEMA


# --------------------------------------------------------------------------
# Merge requests: params and result data


@dataclasses.dataclass(frozen=True)
class PushJob(Record):
    """Push a tested commit to a branch of the connection's repository (the merge queue).

    Fast-forward only: a branch that moved outside Sluice refuses the push
    (failure kind :data:`NOT_FAST_FORWARD`). A branch already at ``commit``
    is a success, so a push repeated after a crash is harmless. A merger
    whose repo cache lacks the commit (another host merged the item) makes
    it again from ``merge_request``, the item's merge
    (:mod:`workers.merger.replay`).
    On a GitHub or GitLab connection the forge merges the pull or merge
    request (``change_ref`` ``refs/pull/<n>/head``, at ``change_commit``)
    through its API instead, after telling it ``report`` (a protected
    branch merges only a change whose required status is green).
    """

    job_id: str
    connection: str
    project: str
    branch: str
    commit: str
    schema: int = SCHEMA
    # the change as the forge knows it (a forge merges its pull request itself)
    change_ref: str = ""
    change_commit: str = ""
    # the item's merge request: how a merger without the commit makes it again
    merge_request: str = ""
    # what the forge is told before it merges (None: nothing)
    report: ForgeReport | None = None


@dataclasses.dataclass(frozen=True)
class ForgeReport(Record):
    """A pipeline's report to a forge; a gate's success is sent before the forge merges.

    Zuul's order: the commit status (``status``, under ``context``), the
    check run (``check``), the comment (``text``, if ``comment``), the
    labels, then the merge. ``url``: where the status links to ("" for nowhere).
    """

    context: str
    text: str
    status: str = ""
    check: str = ""
    comment: bool = False
    url: str = ""
    # labels added to and removed from the pull or merge request (Zuul's label, unlabel)
    labels: tuple[str, ...] = ()
    unlabels: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class PushResult(Record):
    job_id: str
    status: Status
    failure: Failure | None = None
    schema: int = SCHEMA


# Failure kind of a push the target branch refused because it moved.
NOT_FAST_FORWARD = "not-fast-forward"


class JobKind(enum.StrEnum):
    """What a merge request asks for; each kind has one job and one result class."""

    MERGE = "merge"
    FILES_CHANGES = "files-changes"
    CONFIG = "config"
    BRANCH_HEADS = "branch-heads"
    PUSH = "push"


MergerJob = MergeJob | FilesChangesJob | ConfigJob | BranchHeadsJob | PushJob
MergerResult = MergeResult | FilesChangesResult | ConfigResult | BranchHeadsResult | PushResult

# kind -> (job class, result class)
KIND_CLASSES: Mapping[JobKind, tuple[type[MergerJob], type[MergerResult]]] = {
    JobKind.MERGE: (MergeJob, MergeResult),
    JobKind.FILES_CHANGES: (FilesChangesJob, FilesChangesResult),
    JobKind.CONFIG: (ConfigJob, ConfigResult),
    JobKind.BRANCH_HEADS: (BranchHeadsJob, BranchHeadsResult),
    JobKind.PUSH: (PushJob, PushResult),
}

_KINDS = frozenset(kind.value for kind in JobKind)

# Failure kind of a request whose merger died (the sweep completed it as lost).
LOST = "lost"
# What the ZooKeeper layer stores as the result of a lost request.
LOST_RESULT: Mapping[str, Any] = {"result": "LOST"}


def job_kind(job: MergerJob) -> JobKind:
    """The kind of ``job`` (from its class)."""
    for kind, (job_class, _) in KIND_CLASSES.items():
        if type(job) is job_class:
            return kind
    raise InvalidRecordError(f"not a merger job: {type(job).__name__}")


def parse_kind(kind: object) -> JobKind:
    """``kind`` as a :class:`JobKind`; :class:`InvalidRecordError` if it is none."""
    if isinstance(kind, str) and kind in _KINDS:
        return JobKind(kind)
    raise InvalidRecordError(f"unknown merger job kind {kind!r}")


def request_params(job: MergerJob) -> dict[str, Any]:
    """The params of a merge request for ``job``: ``{"kind": ..., "job": job.to_dict()}``."""
    return {"kind": job_kind(job).value, "job": job.to_dict()}


def read_params(params: Mapping[str, Any]) -> tuple[JobKind, dict[str, Any]]:
    """The kind and the job dict of a request's params (not decoded: the worker's engine does).

    :class:`InvalidRecordError` if ``params`` are not in the shape of
    :func:`request_params`.
    """
    kind = parse_kind(params.get("kind"))
    job = params.get("job")
    if not isinstance(job, dict):
        raise InvalidRecordError(f"merge request params hold no job (got {type(job).__name__})")
    return kind, job


def read_job(params: Mapping[str, Any]) -> MergerJob:
    """The typed job of a request's params; :class:`InvalidRecordError` if malformed."""
    kind, job = read_params(params)
    return KIND_CLASSES[kind][0].from_dict(job)


def result_data(kind: JobKind | str, result: Mapping[str, Any]) -> dict[str, Any]:
    """What a merger stores as a request's result: the result's dict and its ``kind``."""
    return {**result, "kind": parse_kind(kind).value}


def is_lost(data: Mapping[str, Any]) -> bool:
    """Whether stored result data is the ZooKeeper layer's ``LOST`` marker."""
    return bool(data.get("result") == LOST_RESULT["result"])


def failed_result(kind: JobKind | str, job_id: str, failure: Failure) -> MergerResult:
    """A ``failed`` result of ``kind``'s result class with ``failure``."""
    result_class = KIND_CLASSES[parse_kind(kind)][1]
    return result_class(job_id=job_id, status=Status.FAILED, failure=failure)


def lost_result(kind: JobKind | str, job_id: str = "") -> MergerResult:
    """The typed result of a request whose merger died: failed, failure kind :data:`LOST`."""
    failure = Failure(LOST, "the merger running this request died; merge again")
    return failed_result(kind, job_id, failure)


def decode_result(
    data: Mapping[str, Any],
    *,
    lost: bool = False,
    kind: JobKind | str | None = None,
    job_id: str = "",
) -> MergerResult:
    """The typed result of a request's stored result data.

    ``kind`` is what the submitter asked for: it decodes a lost request
    (whose data names no kind; default ``merge``) and, when given, must
    match the stored kind. ``job_id`` names a lost request's job.
    :class:`InvalidRecordError` if the data is no merger result.
    """
    if lost or is_lost(data):
        return lost_result(kind or JobKind.MERGE, job_id)
    stored = parse_kind(data.get("kind", kind))
    if kind is not None and parse_kind(kind) is not stored:
        raise InvalidRecordError(f"expected a {parse_kind(kind)} result, got {stored}")
    fields = {k: v for k, v in data.items() if k != "kind"}
    return KIND_CLASSES[stored][1].from_dict(fields)


def config_files_key(project: str, branch: str) -> str:
    """The key of a project branch in ``MergeOutcome.config_files``."""
    return f"{project}@{branch}"


def split_config_files_key(key: str, projects: list[str]) -> tuple[str, str] | None:
    """``(project, branch)`` of a key, the longest tenant project that fits; None if none."""
    for project in sorted(projects, key=len, reverse=True):
        prefix = f"{project}@"
        if key.startswith(prefix) and len(key) > len(prefix):
            return project, key[len(prefix) :]
    return None
