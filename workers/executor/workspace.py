"""A build's workspace: its folders, its git checkouts, its executables.

Layout (``<state_dir>`` from the settings)::

    <state_dir>/builds/<build uuid>/        the workspace (SLUICE_WORKSPACE)
        src/<project>/                      a checkout per project in the repo state
        content/<n>/<project>/              job content at another branch (StepLocator)
        home/                               HOME of the job
        tmp/                                TMPDIR of the job
        sluice/vars.json                    the job's vars (SLUICE_VARS_FILE)
        sluice/result.json                  result data the job may write (SLUICE_RESULT_FILE)
    <state_dir>/logs/<build uuid>/          the log folder (SLUICE_LOG_DIR), kept
        job-output.txt

Checkouts are made fast. From a local path (the merger's repo cache)
nothing is copied: the new repository borrows the cache's objects through
``objects/info/alternates`` (what ``git clone --shared`` does). The
repository itself (``HEAD``, ``config``, the branches in one
``packed-refs`` file) is written directly as ``git init`` and
``git pack-refs`` would write it, and the commits are looked up in-process
in the source's objects: loose (the merger's fresh merges are), whole in
a pack (:mod:`workers.executor.packindex`) or rebuilt from its deltas. The files and ``.git/index``
are written in-process too (:mod:`workers.executor.treecheckout`: objects
read loose or packed, deltas resolved), so a common checkout starts no
git process. ``git checkout`` writes them, from the fresh repository,
wherever that module says no (attributes, submodules, names git may
refuse, an object only in the source's alternates, more than a few dozen
files, a worker git configuration that may convert files), for a SHA-256
source, and for fetched sources. A commit found none of these ways
(missing, another type, unreadable) is looked up with ``git cat-file``;
a branch name outside the plain ones (:data:`PLAIN_BRANCH`) is left to
``git init`` and ``git update-ref``, which validate it. The cache must
not prune objects a running build uses (``git gc`` keeps anything
referenced or younger than two weeks). From a URL (``file://`` too),
exactly the commits of the repo state are fetched (or, where the server
refuses a fetch by commit id, its branches).

Every branch of the repo state becomes a local branch at its commit; the
change's branch (or the job's ``override-checkout`` of the project, or its
only branch) is checked out. ``RunnerOptions.share_objects = False`` trades speed
for independence from the cache: local sources are then fetched from too.
No remote is configured: the job sees the state
Sluice tested, not whatever the remote has now.
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from scheduler.wire.build_spec import BuildSpec
from workers.executor.errors import BuildCancelledError, RefusedError, WorkspaceError
from workers.executor.job import Step, checkouts
from workers.executor.objectstore import readable_commits
from workers.executor.packindex import packed_commits
from workers.executor.recycle import (
    SPARE_PREFIX,
    put_aside,
    recyclable_projects,
    remove_tree,
    take_spare,
    write_over,
)
from workers.executor.treecheckout import checkout_commit
from workers.gitobjects import loose_object_kind

PLAYBOOK_SUFFIXES = (".yaml", ".yml")
GIT_TIMEOUT = 300.0
# Branch names whose ref file is written directly: ``/``-separated
# components of letters, digits, ``_``, ``-`` and ``.``, none starting with
# ``.`` or ``-`` or ending in ``.`` or ``.lock``, no ``..``, not ``HEAD``.
# Anything else goes through git, which validates it.
PLAIN_BRANCH = re.compile(
    r"(?!HEAD$)(?!.*\.\.)(?!.*\.(lock)?(/|$))"
    r"[A-Za-z0-9_][A-Za-z0-9_.-]*(/[A-Za-z0-9_][A-Za-z0-9_.-]*)*"
)
# The first line of a ``packed-refs`` file as ``git pack-refs`` writes it
# (its trailing space included): the refs below are sorted, and a tag
# would be followed by its peeled commit (a branch needs none).
PACKED_REFS_HEADER = "# pack-refs with: peeled fully-peeled sorted \n"
SHA1_HEX = re.compile("[0-9a-f]{40}")
# ``extensions.objectFormat`` in a repository's config (SHA-256 repositories).
OBJECT_FORMAT = re.compile(r"^\s*objectformat\s*=\s*\"?([^\s\"]*)", re.IGNORECASE | re.MULTILINE)
# What ``git init`` writes to a new repository's config (no templates: a
# workspace needs no sample hooks).
REPOSITORY_CONFIG = """[core]
\trepositoryformatversion = 0
\tfilemode = true
\tbare = false
\tlogallrefupdates = true
"""


@dataclass(frozen=True)
class BuildLayout:
    """Where everything of one build lives on disk."""

    root: Path
    log_dir: Path

    @classmethod
    def for_build(
        cls, state_dir: Path, build_uuid: str, build_dir: Path | None = None
    ) -> BuildLayout:
        """The build's layout: its workspace under ``build_dir`` (default
        ``<state_dir>/builds``), its logs under ``<state_dir>/logs``."""
        return cls(
            root=builds_folder(state_dir, build_dir) / build_uuid,
            log_dir=state_dir / "logs" / build_uuid,
        )

    # Each path is made once per build (a build asks for them dozens of times).
    @cached_property
    def src_dir(self) -> Path:
        return self.root / "src"

    @cached_property
    def home_dir(self) -> Path:
        return self.root / "home"

    @cached_property
    def tmp_dir(self) -> Path:
        return self.root / "tmp"

    @cached_property
    def vars_file(self) -> Path:
        return self.root / "sluice" / "vars.json"

    @cached_property
    def result_file(self) -> Path:
        return self.root / "sluice" / "result.json"

    @cached_property
    def log_file(self) -> Path:
        return self.log_dir / "job-output.txt"

    def project_dir(self, project: str) -> Path:
        return self.src_dir / project

    @cached_property
    def real_root(self) -> Path:
        """The workspace's real path: every folder in it was made by the executor
        (never a symlink), so only the folder of all workspaces is resolved, once
        a process."""
        parent = str(self.root.parent)
        real = _real_folders.get(parent)
        if real is None:
            real = _real_folders[parent] = os.path.realpath(parent)
        return Path(real) / self.root.name


# the folder of all workspaces -> its real path (resolved once a process)
_real_folders: dict[str, str] = {}


def builds_folder(state_dir: Path, build_dir: Path | None = None) -> Path:
    """The folder that holds every workspace: ``executor.build_dir`` or ``<state_dir>/builds``."""
    return build_dir if build_dir is not None else state_dir / "builds"


def create_folders(layout: BuildLayout, recycle_for: Collection[str] | None = None) -> bool:
    """Make the workspace's folders; a leftover workspace of the same uuid is replaced.

    With ``recycle_for`` (the projects of the build's repo state) the
    process's spare workspace, if it has one, becomes this one, pruned to
    what a new one holds (:mod:`workers.executor.recycle`). True when it did.

    The folder of all workspaces is made private (0700) when it is made: a
    ``build_dir`` on a shared tmpfs (``/dev/shm``) must not show builds to
    other users.
    """
    if os.path.lexists(layout.root):
        remove_workspace(layout)
    builds = layout.root.parent
    if not builds.is_dir():
        builds.parent.mkdir(parents=True, exist_ok=True)
        builds.mkdir(mode=0o700, exist_ok=True)
    recycled = recycle_for is not None and take_spare(layout.root, recycle_for)
    for folder in (layout.src_dir, layout.home_dir, layout.tmp_dir, layout.vars_file.parent):
        folder.mkdir(parents=True, exist_ok=True)
    layout.log_dir.mkdir(parents=True, exist_ok=True)
    return recycled


def remove_workspace(layout: BuildLayout) -> None:
    """Delete the workspace (never the logs), even if the job made files read-only."""
    remove_tree(layout.root)


def put_workspace_aside(layout: BuildLayout, scrub_for: Collection[str] | None = None) -> None:
    """Keep the finished workspace as the process's spare, or else delete it.

    With ``scrub_for`` (the projects of the build's repo state; a sandboxed
    build) the spare is scrubbed at once rather than when it is taken
    (:func:`workers.executor.recycle.scrub`): what a new workspace would not
    hold is removed and what stays is inert (no set-id bit, no FIFO), so
    nothing the job left lives on between builds.
    """
    if not put_aside(layout.root, scrub_for):
        remove_workspace(layout)


def remove_stale_workspaces(
    state_dir: Path, keep: Collection[str], build_dir: Path | None = None
) -> list[str]:
    """Remove the workspace of every build not in ``keep``; the uuids removed.

    For a worker's start-up (a worker killed mid-build leaves its workspaces
    behind): ``keep`` names the builds still running or held.
    """
    builds = builds_folder(state_dir, build_dir)
    removed = []
    for folder in sorted(builds.iterdir()) if builds.is_dir() else []:
        if folder.name.startswith(SPARE_PREFIX):
            continue  # a process's spare: remove_orphan_spares
        if folder.is_dir() and folder.name not in keep:
            remove_workspace(BuildLayout(root=folder, log_dir=state_dir / "logs" / folder.name))
            removed.append(folder.name)
    return removed


def checkout_projects(
    spec: BuildSpec,
    layout: BuildLayout,
    *,
    share: bool = True,
    cancelled: Callable[[], bool] = lambda: False,
    recycled: bool = False,
) -> dict[str, str]:
    """Check out every project of the repo state at its commits; the branch of each.

    ``cancelled`` is asked before each project (fetches can be long):
    :class:`BuildCancelledError` when it says yes. ``recycled``: the
    workspace is a pruned spare, whose checkouts are written over.
    """
    repo_state = spec.context.repo_state
    chosen = {project: choose_branch(spec, project) for project in repo_state}
    reusable = recyclable_projects(repo_state) if recycled else set()
    for project, branches in repo_state.items():
        if cancelled():
            raise BuildCancelledError("cancelled while preparing the workspace")
        checkout(
            source=spec.context.sources[project],
            dest=layout.project_dir(project),
            branches=branches,
            branch=chosen[project],
            share=share,
            reuse=project in reusable,
        )
    return chosen


class StepLocator:
    """Finds each step's executable: in a project checkout or a content checkout.

    A step of the change's project (or of another project in the repo state)
    at the branch checked out for it runs from ``src/<project>``. A step at
    another branch gets a checkout of its own, once per project and branch,
    under ``content/<n>/<project>`` (Zuul keeps job content apart the same
    way). A trusted step, or one that holds a secret, always runs from such
    a checkout: ``content/`` stays the executor's, so no other step of the
    build can change what it runs.
    """

    def __init__(
        self,
        spec: BuildSpec,
        layout: BuildLayout,
        chosen: Mapping[str, str],
        *,
        share: bool = True,
    ) -> None:
        self.share = share
        self.spec = spec
        self.layout = layout
        self.chosen = chosen
        self.content: dict[tuple[str, str, str], Path] = {}

    def resolve(self, step: Step) -> Path:
        """The real path of ``step``'s executable (see :func:`resolve_executable`)."""
        repository = self.repository(step)
        real = self.layout.real_root / repository.relative_to(self.layout.root)
        return resolve_executable(repository, step.path, real)

    def repository(self, step: Step) -> Path:
        project, branch = step.project, step.branch
        repo_state = self.spec.context.repo_state
        if project not in repo_state:
            raise RefusedError(f"{step.path}: project {project} is not in the repo state")
        if branch == self.chosen[project] and step.commit is None and not step.protected:
            return self.layout.project_dir(project)
        commit = step.commit or repo_state[project].get(branch)
        if commit is None:
            raise RefusedError(f"{step.path}: {project} has no branch {branch!r} in the repo state")
        key = (project, branch, commit)
        if key not in self.content:
            dest = self.layout.root / "content" / str(len(self.content)) / project
            source = self.spec.context.sources[project]
            checkout(source, dest, {branch: commit}, branch, self.share)
            self.content[key] = dest
        return self.content[key]


def choose_branch(spec: BuildSpec, project: str) -> str:
    """The branch to check out: override, the change's branch, or the only one.

    Refused (``ERROR``: a retry cannot help) when none of them applies.
    """
    branches = spec.context.repo_state[project]
    wanted = checkouts(spec).get(project)
    if wanted is not None:
        if wanted not in branches:
            raise RefusedError(f"{project}: checkout branch {wanted!r} is not in the repo state")
        return wanted
    branch = spec.job.branch
    if branch in branches:
        return branch
    if len(branches) == 1:
        return next(iter(branches))
    raise RefusedError(
        f"{project}: repo state has no branch {branch!r} and several others "
        f"({', '.join(sorted(branches))}); name one with override-checkout"
    )


def checkout(
    source: str,
    dest: Path,
    branches: Mapping[str, str],
    branch: str,
    share: bool = True,
    *,
    reuse: bool = False,
) -> None:
    """Make ``dest`` a repository with ``branches`` at their commits, ``branch`` checked out.

    With ``share`` a local source lends its objects (alternates); without,
    the commits are fetched from it like from a URL. With ``reuse`` a
    checkout already at ``dest`` (a recycled workspace's, pruned) is written
    over where possible, else removed first.
    """
    if not branches:
        raise WorkspaceError(f"{dest.name}: repo state lists no branch")
    dest.parent.mkdir(parents=True, exist_ok=True)
    local = local_git_dir(source) if share else None
    objects = (local / "objects").resolve() if local is not None else None
    plain = all(PLAIN_BRANCH.fullmatch(name) for name in (branch, *branches))
    # In-process (treecheckout) in a repository written here whose objects are borrowed.
    shared = objects if plain and local is not None and _sha1_repository(local) else None
    # A recycled checkout (already pruned: recycle.py) is written over in place
    # only where treecheckout writes it; anywhere else it starts anew.
    reused = reuse and os.path.lexists(dest)
    if reused and shared is None:
        remove_tree(dest)
        reused = False
    if plain:
        _init_repository(dest / ".git", branch)
    else:
        _git(["init", "-q", f"--initial-branch={branch}", str(dest)])
    if local is not None and objects is not None:
        write_over(dest / ".git" / "objects" / "info" / "alternates", f"{objects}\n".encode())
        if not stored_commits(local, objects, set(branches.values())):
            _check_commits(source, dest, branches)
    else:
        _fetch(source, dest, sorted(set(branches.values())))
        _check_commits(source, dest, branches)
    if plain:
        _write_refs(dest / ".git", branches)
    else:
        updates = "".join(
            f"update refs/heads/{name} {commit}\n" for name, commit in branches.items()
        )
        _git(["update-ref", "--stdin"], cwd=dest, stdin=updates)
    if shared is None or not checkout_commit(shared, dest, branches[branch], reuse=reused):
        _git(["checkout", "-q", "-f", branch], cwd=dest)


def _init_repository(git_dir: Path, branch: str) -> None:
    """What ``git init --initial-branch=BRANCH`` makes, without its templates and empty folders."""
    try:
        # what git needs to see a repository (it makes the others when it needs them)
        for folder in ("objects/info", "refs"):
            (git_dir / folder).mkdir(parents=True, exist_ok=True)
        write_over(git_dir / "config", REPOSITORY_CONFIG.encode())
        write_over(git_dir / "HEAD", f"ref: refs/heads/{branch}\n".encode())
    except OSError as exc:
        raise WorkspaceError(f"cannot create {git_dir}: {exc}") from None


def _write_refs(git_dir: Path, branches: Mapping[str, str]) -> None:
    """The branches' refs in one ``packed-refs`` file, as ``git pack-refs`` writes it.

    A branch that is another's folder (``a`` and ``a/b``) is refused as
    git would refuse it (git reading a ``packed-refs`` file would not).
    """
    names = sorted(branches)  # the same prefix: sorted as their refnames
    present = set(names)
    for name in names:
        parts = name.split("/")
        for end in range(1, len(parts)):
            if (folder := "/".join(parts[:end])) in present:
                raise WorkspaceError(
                    f"cannot write the ref of branch {name}: branch {folder} is in its way"
                )
    lines = "".join(f"{branches[name]} refs/heads/{name}\n" for name in names)
    try:
        write_over(git_dir / "packed-refs", (PACKED_REFS_HEADER + lines).encode())
    except OSError as exc:
        raise WorkspaceError(f"cannot write the refs of the branches: {exc}") from None


def stored_commits(git_dir: Path, objects: Path, commits: Collection[str]) -> bool:
    """Whether every one of ``commits`` is a commit stored under ``objects``, read in-process.

    Loose (:func:`loose_commits`) or whole in a pack of a SHA-1 repository
    (:func:`workers.executor.packindex.packed_commits`), or else rebuilt
    from its deltas (:func:`workers.executor.objectstore.readable_commits`).
    False when one is found none of these ways: the caller asks git, which
    also reads alternates and SHA-256 repositories, and says what is missing.
    """
    if not all(SHA1_HEX.fullmatch(commit) for commit in commits):
        return False
    folder, now = str(objects), time.monotonic()
    unknown = [c for c in commits if _found_commits.get((folder, c), 0.0) <= now]
    packed = [commit for commit in unknown if loose_object_kind(objects, commit) != "commit"]
    if packed and not (
        _sha1_repository(git_dir)
        and (packed_commits(objects, packed) or readable_commits(objects, packed))
    ):
        return False
    if len(_found_commits) + len(unknown) > FOUND_COMMITS_MAX:
        _found_commits.clear()
    _found_commits.update(dict.fromkeys(((folder, c) for c in unknown), now + FOUND_COMMITS_TTL))
    return True


# A commit found under an objects folder stays there (git prunes only what no
# ref holds and is two weeks old): (folder, commit) -> until when (monotonic) it
# is taken as found again without a look. Every build of a project asks for
# every branch of its repo state, twice (speculation.py, then the checkout).
_found_commits: dict[tuple[str, str], float] = {}
FOUND_COMMITS_TTL = 600.0
FOUND_COMMITS_MAX = 10_000


def _sha1_repository(git_dir: Path) -> bool:
    """Whether ``git_dir``'s objects are named by SHA-1 (no other ``objectFormat``)."""
    try:
        config = (git_dir / "config").read_text(errors="replace")
    except OSError:
        return False
    return all(value.lower() == "sha1" for value in OBJECT_FORMAT.findall(config))


def loose_commits(objects: Path, commits: Collection[str]) -> bool:
    """Whether every one of ``commits`` is a loose commit object under ``objects``.

    Read in-process (the header of a zlib-compressed loose object says its
    type): False as soon as one is not loose, so the caller asks git (which
    also reads packs and alternates).
    """
    return all(SHA1_HEX.fullmatch(commit) for commit in commits) and all(
        loose_object_kind(objects, commit) == "commit" for commit in commits
    )


def local_git_dir(source: str) -> Path | None:
    """The git dir of a local path, None for a URL (``file://`` included: fetched)."""
    if "://" in source or (":" in source.split("/", 1)[0] and "@" in source):
        return None
    path = Path(source)
    if (path / ".git").is_dir():
        return path / ".git"
    if (path / "objects").is_dir() and (path / "HEAD").is_file():
        return path
    if (path / ".git").is_file():  # a worktree: borrow the common dir's objects
        common = _git(["rev-parse", "--git-common-dir"], cwd=path).strip()
        return (path / common).resolve()
    raise WorkspaceError(f"{source}: not a git repository")


def _check_commits(source: str, dest: Path, branches: Mapping[str, str]) -> None:
    """Fail clearly when a commit of the repo state is not in the source."""
    commits = sorted(set(branches.values()))
    answer = _git(["cat-file", "--batch-check"], cwd=dest, stdin="".join(f"{c}\n" for c in commits))
    found = {line.split()[0] for line in answer.splitlines() if line.split()[1:2] == ["commit"]}
    missing = [f"{name} at {commit}" for name, commit in branches.items() if commit not in found]
    if missing:
        raise WorkspaceError(f"{source}: no such commit for {', '.join(sorted(missing))}")


def _fetch(url: str, dest: Path, commits: Sequence[str]) -> None:
    """Fetch exactly ``commits``; fall back to all branches where refused."""
    try:
        _git(["fetch", "-q", "--no-tags", url, *commits], cwd=dest)
    except WorkspaceError:
        _git(["fetch", "-q", "--no-tags", url, "refs/heads/*"], cwd=dest)


def _git(args: Sequence[str], cwd: Path | None = None, stdin: str | None = None) -> str:
    env = dict(os.environ, GIT_TERMINAL_PROMPT="0")
    try:
        done = subprocess.run(
            ["git", "-c", "advice.detachedHead=false", *args],
            cwd=cwd,
            env=env,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise WorkspaceError(f"git {args[0]} failed: {exc}") from None
    if done.returncode != 0:
        detail = (done.stderr or done.stdout).strip().splitlines()
        raise WorkspaceError(f"git {args[0]} failed: {' / '.join(detail[-3:])}")
    return done.stdout


def resolve_executable(project_dir: Path, path: str, real_dir: Path | None = None) -> Path:
    """The real path of a phase's executable inside the project checkout.

    Refused (:class:`RefusedError`): absolute paths, ``..``, anything under
    ``.git``, symlinks that lead out of the checkout, and files that do not
    exist, are not regular files or (except playbooks: ``.yaml``/``.yml``,
    run by ``ansible-playbook``) are not executable.
    """
    parts = path.split("/")
    if not path or path.startswith("/") or ".." in parts:
        raise RefusedError(f"{path}: must be a relative path inside the repository")
    if ".git" in parts:
        raise RefusedError(f"{path}: may not point into the .git folder")
    root = real_dir if real_dir is not None else project_dir.resolve()
    target = _real_below(root, [part for part in parts if part not in ("", ".")])
    if target is None:  # a symlink on the way: where it really leads
        target = (project_dir / path).resolve()
        if not target.is_relative_to(root):
            raise RefusedError(f"{path}: leads out of the repository (through a symlink)")
    if not target.is_file():
        raise RefusedError(f"{path}: no such file in the repository")
    if not path.endswith(PLAYBOOK_SUFFIXES) and not os.access(target, os.X_OK):
        raise RefusedError(f"{path}: is not executable (commit it with mode 755)")
    return target


def _real_below(root: Path, parts: Sequence[str]) -> Path | None:
    """``root/parts`` when no part is a symlink (``root`` real); None: resolve it."""
    current = str(root)
    for part in parts:
        current = f"{current}/{part}"
        try:
            if stat.S_ISLNK(os.lstat(current).st_mode):
                return None
        except OSError:
            return None
    return Path(current)
