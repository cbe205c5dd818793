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
"""

from __future__ import annotations

import dataclasses
import enum
import types
import typing
from typing import Any, ClassVar, Self, Union

from workers.merger.errors import InvalidJobError

SCHEMA = 1


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
        """Build from ``to_dict()`` output; malformed data raises :class:`InvalidJobError`."""
        try:
            hints = typing.get_type_hints(cls)
            kwargs = {
                f.name: _load(hints[f.name], data[f.name])
                for f in dataclasses.fields(cls)
                if f.name in data
            }
            return cls(**kwargs)
        except InvalidJobError:
            raise
        except (AttributeError, KeyError, TypeError, ValueError, StopIteration) as exc:
            raise InvalidJobError(f"malformed {cls.__name__}: {exc!r}") from None


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
class Change(Record):
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
    changes: tuple[Change, ...]
    required: tuple[ProjectRef, ...] = ()
    base_state: tuple[ProjectState, ...] = ()
    timestamp: int | None = None
    read_config: bool = True
    schema: int = SCHEMA


@dataclasses.dataclass(frozen=True)
class FilesChangesJob(Record):
    """List the files a change touches against the merge-base with its branch."""

    job_id: str
    change: Change
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

    ``kind`` is a conflict (``files`` lists the conflicting paths) or one of
    the error kinds of :mod:`workers.merger.errors` (``unreachable``,
    ``unknown-ref``, ``corrupt``, ``invalid``, ``lock-timeout``, ...).
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
    state of its branch after it (kept in the cache under ``merged_ref``),
    ``files`` what the change touches against its branch's merge-base.
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
    schema: int = SCHEMA
