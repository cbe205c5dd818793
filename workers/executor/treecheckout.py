"""A commit's files written in-process: the working tree and index of a fresh checkout.

What ``git checkout -q -f <branch>`` does in the new repository of
:func:`workers.executor.workspace.checkout`, without a git process: the
commit, its trees and their blobs are read from the source's objects
(:mod:`workers.executor.objectstore`: loose or packed, deltas resolved;
commits, trees and what a delta made checked against their names), every
folder and file is written, and
``.git/index`` is written as git would (:mod:`workers.executor.gitindex`).
Files are created as git creates them: mode ``0o666``, or ``0o777`` for
``100755``, less the process's umask; a ``120000`` entry is a symlink to
the blob's content.

The trees are read and checked in full before anything is written.
:func:`checkout_commit` says False, and git checks out instead, when:

* the worker's git configuration could change the files
  (:func:`workers.executor.checkoutconfig.neutral`);
* the repository's folder holds anything but ``.git``;
* an object is missing from the objects folder (the source's alternates
  are not followed), unreadable, or not what its name says;
* a tree holds a ``.gitattributes`` (eol, text, filters: git's business),
  a gitlink (submodule) or a mode git does not write as a file, a name
  twice, or a name :func:`safe_name` refuses (git then refuses or handles
  it), is empty, out of git's order, or nested deeper than
  :data:`MAX_DEPTH`;
* there are more than :data:`MAX_FILES` files (git writes larger trees
  with less CPU: bench/checkout.py), or the trees are larger than such a
  tree's would be (then they are not even parsed), or a blob is larger
  than :data:`MAX_BLOB_BYTES`;
* the commit is not named by 40 hex digits.

A failure while writing (a blob that cannot be read, a file that cannot
be made) removes everything written first: git starts from the fresh
repository. The one thing git writes that this does not is the first
entry of ``HEAD``'s reflog (``checkout: moving from <branch> to <branch>``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workers.executor.checkoutconfig import neutral
from workers.executor.errors import ObjectReadError, WorkspaceError
from workers.executor.gitindex import CacheTree, IndexEntry, write_index
from workers.executor.objectstore import OBJ_BLOB, OBJ_COMMIT, OBJ_TREE, ObjectStore
from workers.executor.packindex import HASH_SIZE
from workers.executor.recycle import (
    EXECUTABLE_MODE,
    FILE_MODE,
    OPEN,
    SYMLINK,
    Shape,
    prune_folder,
    remove_tree,
    write_all,
    write_over,
)
from workers.gitobjects import parse_commit, parse_tree

log = logging.getLogger(__name__)

REGULAR = 0o100644
EXECUTABLE = 0o100755
SYMLINK_MODE = 0o120000
FILE_MODES = (REGULAR, EXECUTABLE, SYMLINK_MODE)
# Beyond this many files git checks out with less CPU (bench/checkout.py: about
# 50 files of a packed tree whose blobs are often deltas, over 160 loose).
MAX_FILES = 64
# Trees larger than this (all of them together) are left to git unparsed: an
# entry is 28 bytes and its name, and folders are entries too.
TREE_BYTES_PER_FILE = 128
MAX_DEPTH = 256
# Larger blobs are left to git, which streams them (core.bigFileThreshold)
# where this would hold them in memory.
MAX_BLOB_BYTES = 64 << 20
SHA1_HEX = re.compile("[0-9a-f]{40}")
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass
class _Plan:
    """What a checkout writes: folders (parents first) and files (path, mode, blob)."""

    folders: list[bytes] = field(default_factory=list)
    files: list[tuple[bytes, int, bytes]] = field(default_factory=list)
    tree_bytes: int = 0  # of the trees read so far


def checkout_commit(objects: Path, dest: Path, commit: str, reuse: bool = False) -> bool:
    """Write ``commit``'s files into ``dest`` and its ``.git/index``; False: left to git.

    ``dest`` holds a fresh repository whose objects are those under
    ``objects``; on False nothing of this call is left in it. With
    ``reuse`` its working tree may hold a former checkout (a recycled
    workspace's, :mod:`workers.executor.recycle`): what the commit does not
    hold is removed, what differs written over; on False the working tree
    is emptied, so git starts from the fresh repository all the same.
    """
    reason = _refusal(dest, commit, reuse) or _checkout(objects, dest, commit, reuse)
    if reason:
        log.debug("%s: checked out by git: %s", dest, reason)
        if reuse:
            _remove_written(dest)
    return not reason


def _refusal(dest: Path, commit: str, reuse: bool) -> str:
    """Why git must check out, whatever the tree (empty: no reason)."""
    if not SHA1_HEX.fullmatch(commit):
        return f"{commit!r} is no commit name"
    if not neutral():
        return "the git configuration may convert files"
    if reuse:
        return ""
    try:
        return "" if os.listdir(dest) == [".git"] else "the folder holds more than .git"
    except OSError as exc:
        return str(exc)


def _checkout(objects: Path, dest: Path, commit: str, reuse: bool) -> str:
    """The checkout written; else why not (nothing of it left)."""
    with ObjectStore(objects, size_max=MAX_BLOB_BYTES) as store:
        try:
            plan, tree = _plan(store, commit)
        except ObjectReadError as exc:
            return str(exc)
        if tree is None:
            return "a tree git must check out"
        return _write(store, dest, plan, tree, reuse)


def _write(store: ObjectStore, dest: Path, plan: _Plan, tree: CacheTree, reuse: bool) -> str:
    """The files and the index written; else why not, with what was written removed."""
    try:
        root = os.fsencode(dest)
        if reuse:
            prune_folder(root, _shape(plan))
        entries = _write_files(store, root, plan, reuse)
        write_index(dest / ".git" / "index", entries, tree)
    except (ObjectReadError, OSError, ValueError) as exc:
        _remove_written(dest)
        return str(exc)
    return ""


def safe_name(name: bytes, mode: int) -> bool:
    """Whether a tree entry's name is one this checkout writes (else git decides).

    Refused: an empty name, ``.``, ``..``, a ``/`` or NUL in it; ``.git``
    in any case, also followed by dots and spaces, ``:`` or ``\\`` (what
    git refuses with ``core.protectNTFS``, its default), and short names
    ``git~N``; ``.gitattributes``; a symlink named ``.git*`` or with a
    ``~`` (git refuses a symlinked ``.gitmodules``, also by short name).
    """
    if not name or b"/" in name or b"\0" in name:
        return False
    if name[0] not in b".gG" and mode != SYMLINK_MODE:
        return True  # (most names: nothing below applies)
    if name in (b".", b".."):
        return False
    lower = name.lower()
    if lower == b".gitattributes" or lower.startswith(b"git~"):
        return False
    if lower.startswith(b".git"):
        rest = lower[4:].lstrip(b". ")
        if not rest or rest[:1] in (b":", b"\\"):
            return False
    return mode != SYMLINK_MODE or not (lower.startswith(b".git") or b"~" in lower)


def _plan(store: ObjectStore, commit: str) -> tuple[_Plan, CacheTree | None]:
    """The folders and files of ``commit``, and its root tree; None if git must check out."""
    plan = _Plan()
    parsed = parse_commit(commit, store.read(bytes.fromhex(commit), OBJ_COMMIT))
    if parsed is None or len(parsed.tree) != 2 * HASH_SIZE:
        return plan, None
    return plan, _walk(store, bytes.fromhex(parsed.tree), b"", b"", plan)


def _walk(
    store: ObjectStore, sha: bytes, name: bytes, prefix: bytes, plan: _Plan
) -> CacheTree | None:
    """Tree ``sha`` (at ``prefix``) into ``plan``, depth first in git's order; None: git's."""
    data = store.read(sha, OBJ_TREE)
    plan.tree_bytes += len(data)
    if plan.tree_bytes > MAX_FILES * TREE_BYTES_PER_FILE:
        return None  # surely more files than MAX_FILES: not even parsed
    entries = parse_tree(data, HASH_SIZE)
    if not entries or prefix.count(b"/") >= MAX_DEPTH:
        return None  # malformed, out of git's order, empty, or too deep
    node = CacheTree(name, sha)
    first = len(plan.files)
    names: set[bytes] = set()
    for entry in entries:
        if entry.name in names or not safe_name(entry.name, entry.mode):
            return None
        names.add(entry.name)
        path = prefix + entry.name
        if entry.is_tree:
            plan.folders.append(path)
            subtree = _walk(store, bytes.fromhex(entry.sha), entry.name, path + b"/", plan)
            if subtree is None:
                return None
            node.subtrees.append(subtree)
        elif entry.mode in FILE_MODES and len(plan.files) < MAX_FILES:
            plan.files.append((path, entry.mode, bytes.fromhex(entry.sha)))
        else:
            return None  # a gitlink, or more files than git checks out with less CPU
    node.entry_count = len(plan.files) - first
    return node


def _shape(plan: _Plan) -> Shape:
    """What the working tree of ``plan`` holds, for :func:`prune_folder` (``.git`` left)."""
    root: dict[str, Any] = {".git": {OPEN: OPEN}}
    folders: dict[bytes, dict[str, Any]] = {b"": root}

    def parent_and_name(path: bytes) -> tuple[dict[str, Any], str]:
        parent, _, name = path.rpartition(b"/")
        return folders[parent], os.fsdecode(name)

    for folder in plan.folders:  # parents first
        parent, name = parent_and_name(folder)
        folders[folder] = parent[name] = {}
    for path, mode, _sha in plan.files:
        parent, name = parent_and_name(path)
        parent[name] = SYMLINK if mode == SYMLINK_MODE else _permissions(mode)
    return root


def _permissions(mode: int) -> int:
    """A new file's permissions for a git mode: git's, less the umask."""
    return EXECUTABLE_MODE if mode == EXECUTABLE else FILE_MODE


def _write_files(store: ObjectStore, root: bytes, plan: _Plan, reuse: bool) -> list[IndexEntry]:
    """The folders and files of ``plan`` made under ``root``; their index entries.

    With ``reuse`` the tree was pruned to ``plan``'s shape: a folder may be
    there already, and a file is written over only where it differs.
    """
    for folder in plan.folders:
        try:
            os.mkdir(b"%s/%s" % (root, folder))
        except FileExistsError:
            if not reuse:
                raise
    entries = []
    for path, mode, sha in plan.files:
        data = store.read(sha, OBJ_BLOB)
        target = b"%s/%s" % (root, path)
        if mode == SYMLINK_MODE:
            if not (reuse and _same_link(target, data)):
                if reuse:
                    _unlink_if_there(target)
                os.symlink(data, target)
        elif reuse:
            _rewrite_file(target, data, _permissions(mode))
        else:
            _write_file(target, data, 0o777 if mode == EXECUTABLE else 0o666)
        entries.append(IndexEntry(path, mode, sha, os.lstat(target)))
    return entries


def _write_file(path: bytes, data: bytes, mode: int) -> None:
    """A new file (never through a symlink, never over another file) holding ``data``."""
    fd = os.open(path, _CREATE, mode)
    try:
        write_all(fd, data)
    finally:
        os.close(fd)


def _rewrite_file(path: bytes, data: bytes, permissions: int) -> None:
    """``path`` holding ``data`` with ``permissions``: the file there written over if it differs.

    The file there is a regular file of one link (pruned); anything else,
    found all the same, is replaced by a new file.
    """
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return _write_file(path, data, permissions)
    if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
        os.unlink(path)
        return _write_file(path, data, permissions)
    write_over(path, data)
    if stat.S_IMODE(info.st_mode) != permissions:
        os.chmod(path, permissions)
    return None


def _same_link(path: bytes, target: bytes) -> bool:
    try:
        return os.readlink(path) == target
    except OSError:
        return False


def _unlink_if_there(path: bytes) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def _remove_written(dest: Path) -> None:
    """Everything in ``dest`` but ``.git`` (all of it written here), and the index."""
    try:
        with os.scandir(dest) as entries:
            for entry in entries:
                if entry.name == ".git":
                    continue
                if entry.is_dir(follow_symlinks=False):
                    remove_tree(Path(entry.path))
                else:
                    os.unlink(entry.path)
        (dest / ".git" / "index").unlink(missing_ok=True)
    except OSError as exc:
        raise WorkspaceError(f"cannot clean {dest} for git checkout: {exc}") from None
