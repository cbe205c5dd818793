"""Recycled workspaces: a finished build's folders become the next build's, made as new.

A build's workspace is a few dozen folders and files (docs/executor.md,
"Recycled workspaces"). Making them and deleting them a moment later is
most of a no-op build's cost on some file systems: on an ext4 without a
journal each new file costs more the more files were deleted in the last
minute (the kernel's inode allocator skips, and looks up, every inode freed
that recently). So a finished workspace is not deleted: it is renamed to
its process's *spare* (``<builds>/.spare-<host>-<pid>``, hidden from jobs like the
other workspaces), and the process's next build renames the spare to its
own workspace and prunes it back to what a new workspace holds.

Nothing of the last build is trusted. The pruning walks every folder
without following a symlink and removes whatever a new workspace would not
have at that place, or would have as another kind of entry:

* at the top, only ``src``, ``home``, ``tmp`` and ``sluice`` stay (as real
  folders); ``home`` and ``tmp`` are emptied; ``sluice`` keeps at most
  ``vars.json`` and ``result.json``, to be written over;
* under ``src``, only the folders that lead to a project of the new build's
  repo state stay; in each project folder the ``.git`` folder keeps only
  what :func:`workers.executor.workspace.checkout` writes (``HEAD``,
  ``config``, ``packed-refs``, ``index``, ``objects/info/alternates`` and
  the ``refs`` folder); the working tree is left to the checkout, which
  removes what the commit does not hold and writes over what differs
  (:mod:`workers.executor.treecheckout`), or, where git must check out,
  removes it all first;
* a file kept is a regular file with one link (a hard link made elsewhere
  by the job would see every later write) and gets a new file's mode; a
  folder kept is a real folder and gets a new folder's mode.

Every file kept is then written in full, or compared byte for byte with
what would be written, so no content of the last build survives. What
differs from a new workspace: the folders' and unchanged files' inode
numbers and times. A workspace is recycled only by the process that put it
aside; one that cannot be pruned (an error) is removed and made anew.
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import stat
import threading
import uuid
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Union

log = logging.getLogger(__name__)

SPARE_PREFIX = ".spare-"


def _process_umask() -> int:
    """The umask, read without changing it (``os.umask`` sets it, for every thread)."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


UMASK = _process_umask()
FOLDER_MODE = 0o777 & ~UMASK
FILE_MODE = 0o666 & ~UMASK
EXECUTABLE_MODE = 0o777 & ~UMASK
# What a pruned folder may hold, by name: a regular file of one link with the
# given permissions (an int), a symlink (SYMLINK), or a folder of that shape
# (a mapping). The key OPEN ("") says the folder's other entries are the
# caller's to deal with (a project's working tree, left to the checkout).
SYMLINK = "symlink"
OPEN = ""
Shape = Mapping[str, Union[int, str, "Shape"]]
# What workspace.checkout writes into a project's .git (the objects are borrowed).
GIT_SHAPE: Shape = {
    "HEAD": FILE_MODE,
    "config": FILE_MODE,
    "packed-refs": FILE_MODE,
    "index": FILE_MODE,
    "objects": {"info": {"alternates": FILE_MODE}},
    "refs": {},
}
# The folders of workspaces in which this process looked for the spares of
# processes that are gone (once each).
_swept: set[Path] = set()
# The spares scrubbed when they were put aside, and for which projects (taking
# one for the same projects needs no second pruning); with the renames, under
# the lock (a process may run builds in several threads).
_scrubbed: dict[Path, frozenset[str]] = {}
_spare_lock = threading.Lock()


def spare_of(builds: Path, pid: int | None = None) -> Path:
    """The spare workspace of process ``pid`` of this host (this process by default).

    The host's name is in it: containers on one host share a folder of
    workspaces (a volume) but not their process numbers.
    """
    return builds / f"{SPARE_PREFIX}{socket.gethostname()}-{os.getpid() if pid is None else pid}"


def put_aside(root: Path, scrub_for: Collection[str] | None = None) -> bool:
    """Make the finished workspace ``root`` this process's spare; False: it is left where it is.

    Nothing is deleted here: the workspace is renamed. False when the
    process has a spare already, or the rename fails. With ``scrub_for``
    (the projects of a sandboxed build) the spare is scrubbed at once
    (:func:`scrub`), or removed if it cannot be; taken for the same
    projects, it needs no second pruning.
    """
    spare = spare_of(root.parent)
    with _spare_lock:
        if os.path.lexists(spare):
            return False
        try:
            os.rename(root, spare)
        except OSError as exc:
            log.warning("cannot keep workspace %s as a spare: %s", root, exc)
            return False
        _scrubbed.pop(spare, None)
        if scrub_for is not None:
            try:
                scrub(spare, scrub_for)
                _scrubbed[spare] = frozenset(scrub_for)
            except (OSError, ValueError) as exc:
                log.warning("cannot scrub spare workspace %s, removing it: %s", spare, exc)
                remove_tree(spare)
    if root.parent not in _swept:
        _swept.add(root.parent)
        remove_orphan_spares(root.parent)
    return True


def take_spare(root: Path, projects: Collection[str]) -> bool:
    """This process's spare, renamed to ``root`` and pruned for ``projects``; False: none.

    ``root`` must not exist. A spare that cannot be pruned is removed (and
    False returned): the caller makes the workspace anew.
    """
    spare = spare_of(root.parent)
    with _spare_lock:
        try:
            os.rename(spare, root)
        except FileNotFoundError:
            return False
        except OSError as exc:
            log.warning("cannot reuse spare workspace %s: %s", spare, exc)
            return False
        scrubbed_for = _scrubbed.pop(spare, None)
    if scrubbed_for == frozenset(projects):
        return True  # pruned for these projects when it was put aside, untouched since
    try:
        prune(root, projects)
    except (OSError, ValueError) as exc:
        log.warning("cannot prune recycled workspace %s, making it anew: %s", root, exc)
        remove_tree(root)
        return False
    return True


def remove_orphan_spares(builds: Path) -> list[str]:
    """Remove the spares of this host's processes that are gone; their names."""
    removed: list[str] = []
    ours = f"{SPARE_PREFIX}{socket.gethostname()}-"
    try:
        names = [name for name in os.listdir(builds) if name.startswith(ours)]
    except OSError:
        return removed
    for name in names:
        pid = name[len(ours) :]
        if pid.isdigit() and _alive(int(pid)):
            continue
        # Claimed by a rename first: a new process given the same number may
        # be taking it as its own, and a removal must never go on inside it.
        trash = builds / f".trash-{uuid.uuid4().hex}"
        try:
            os.rename(builds / name, trash)
            remove_tree(trash)
        except OSError as exc:
            log.warning("cannot remove spare workspace %s: %s", builds / name, exc)
            continue
        removed.append(name)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def workspace_shape(projects: Collection[str]) -> Shape:
    """What a pruned workspace may hold for a build of ``projects``.

    ``secrets`` and ``step`` (the executor's folders for a step's secrets
    file and a protected step's own folder) stay, emptied: made again for
    every build, they were most of the inodes a no-op build made and freed.
    """
    return {
        "src": _projects_shape(projects),
        "home": {},
        "tmp": {},
        "sluice": {"vars.json": FILE_MODE, "result.json": FILE_MODE},
        "secrets": {},
        "step": {},
    }


def recyclable_projects(projects: Collection[str]) -> set[str]:
    """The projects whose checkout a recycled workspace keeps (to be written over).

    Not a project that is another's folder (``a`` and ``a/b``), nor one
    inside it: their checkouts start from nothing.
    """
    names = {name: name.split("/") for name in projects}
    leaders = {tuple(parts[:end]) for parts in names.values() for end in range(1, len(parts))}
    return {
        name
        for name, parts in names.items()
        if tuple(parts) not in leaders
        and not any("/".join(parts[:end]) in names for end in range(1, len(parts)))
        and all(part and part not in (".", "..") for part in parts)
    }


def _projects_shape(projects: Collection[str]) -> Shape:
    """The folders that lead to each project; a project's folder is open but for its ``.git``."""
    shape: dict[str, object] = {}
    for name in recyclable_projects(projects):
        *leading, last = name.split("/")
        folder = shape
        for part in leading:
            folder = folder.setdefault(part, {})  # type: ignore[assignment]
        folder[last] = {".git": GIT_SHAPE, OPEN: OPEN}
    return shape  # type: ignore[return-value]


def scrub(root: Path, projects: Collection[str]) -> None:
    """:func:`prune` ``root`` and make what stays inert, in one walk.

    For a sandboxed build's workspace put aside: the job's user owned its
    checkouts and home, and may have left a set-id file or a FIFO in them.
    What the shape keeps gets a new entry's mode (no set-id bit); in the
    folders it leaves open (a project's working tree) every FIFO, socket
    and device node is removed and every set-id bit taken off. What stays
    is inert in the private folder of workspaces until the next build hands
    it to its own user (``sandbox.hand_over``).
    """
    prune_folder(os.fsencode(root), workspace_shape(projects), inert=True)


def _make_inert(path: bytes, info: os.stat_result) -> None:
    """No FIFO, socket or device node and no set-id bit at or under ``path``; links left."""
    if stat.S_ISLNK(info.st_mode):
        return
    if stat.S_ISDIR(info.st_mode):
        if info.st_mode & (stat.S_ISUID | stat.S_ISGID):
            os.chmod(path, stat.S_IMODE(info.st_mode) & ~(stat.S_ISUID | stat.S_ISGID))
        with os.scandir(path) as scan:
            entries = list(scan)
        for entry in entries:
            _make_inert(entry.path, entry.stat(follow_symlinks=False))
    elif not stat.S_ISREG(info.st_mode):
        os.unlink(path)  # a FIFO, a socket, a device node: never in a checkout
    elif info.st_mode & (stat.S_ISUID | stat.S_ISGID):
        os.chmod(path, stat.S_IMODE(info.st_mode) & ~(stat.S_ISUID | stat.S_ISGID))


def prune(root: Path, projects: Collection[str]) -> None:
    """Remove from ``root`` whatever a new workspace for ``projects`` would not hold."""
    prune_folder(os.fsencode(root), workspace_shape(projects))


def prune_folder(folder: bytes, shape: Shape, *, inert: bool = False) -> None:
    """Remove from ``folder`` every entry ``shape`` has not, or has as another kind.

    Nothing is followed through a symlink. The folders and files kept get
    the modes a new one would have; with ``inert``, what an open folder
    holds beyond the shape is made inert (:func:`scrub`).
    """
    _own_folder(folder)
    open_folder = OPEN in shape
    with os.scandir(folder) as scan:
        entries = list(scan)
    for entry in entries:
        wanted = shape.get(os.fsdecode(entry.name))
        info = entry.stat(follow_symlinks=False)
        if wanted is None:
            if not open_folder:
                _remove(entry.path, info)
            elif inert:
                _make_inert(entry.path, info)
        elif isinstance(wanted, int):
            if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
                _remove(entry.path, info)
            elif stat.S_IMODE(info.st_mode) != wanted:
                os.chmod(entry.path, wanted)
        elif wanted == SYMLINK:
            if not stat.S_ISLNK(info.st_mode):
                _remove(entry.path, info)
        elif isinstance(wanted, Mapping):
            if stat.S_ISDIR(info.st_mode):
                prune_folder(entry.path, wanted, inert=inert)
            else:
                _remove(entry.path, info)


def _own_folder(folder: bytes) -> None:
    """Refuse anything but a real folder; give it a new folder's mode."""
    info = os.lstat(folder)
    if not stat.S_ISDIR(info.st_mode):
        raise ValueError(f"{os.fsdecode(folder)} is not a folder")
    if stat.S_IMODE(info.st_mode) != FOLDER_MODE:
        os.chmod(folder, FOLDER_MODE)


def _remove(path: bytes, info: os.stat_result) -> None:
    if stat.S_ISDIR(info.st_mode):
        remove_tree(Path(os.fsdecode(path)))
    else:
        os.unlink(path)


_WRITE_OVER = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


def write_over(path: str | bytes | os.PathLike[str], data: bytes) -> None:
    """``path`` holding ``data``: a new file, or the file there written over where it differs.

    Never through a symlink (refused). A file of the same content is not
    written at all, and one that differs is written over and cut to size,
    never truncated to nothing first: ext4 flushes a file emptied and
    written again when it is closed (its ``auto_da_alloc``).
    """
    fd = os.open(path, _WRITE_OVER, 0o666)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise IsADirectoryError(f"{os.fsdecode(path)} is not a regular file")
        if info.st_size != len(data) or read_all(fd, len(data)) != data:
            write_all(fd, data)
            if info.st_size > len(data):
                os.ftruncate(fd, len(data))
    finally:
        os.close(fd)


def write_all(fd: int, data: bytes, offset: int = 0) -> None:
    """All of ``data`` written at ``offset`` of ``fd``."""
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        view, offset = view[written:], offset + written


def read_all(fd: int, size: int) -> bytes:
    """Up to ``size`` bytes from the start of ``fd``."""
    parts, offset = [], 0
    while offset < size:
        part = os.pread(fd, size - offset, offset)
        if not part:
            break
        parts.append(part)
        offset += len(part)
    return b"".join(parts)


def remove_tree(path: Path) -> None:
    """Delete a folder and everything in it, even what a job made read-only."""

    def make_writable_and_retry(func: Callable[..., object], name: str, exc_info: object) -> None:
        # A job may leave read-only folders behind (go's module cache does).
        os.chmod(os.path.dirname(name) or ".", 0o700)
        if os.path.isdir(name) and not os.path.islink(name):
            os.chmod(name, 0o700)
            shutil.rmtree(name, ignore_errors=True)
        else:
            os.unlink(name)

    if os.path.lexists(path):
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, onerror=make_writable_and_retry)
        else:
            os.unlink(path)
