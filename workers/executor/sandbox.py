"""Running a job's executables in bubblewrap (``executor.sandbox: bwrap``).

What a sandboxed step sees (docs/security.md has the threat model):

* **A minimal root, read-only**: the system folders (``/usr`` and the
  ``/bin``, ``/lib`` ... links or folders beside it), a short list of
  ``/etc`` entries (:data:`ETC`: name service, TLS roots, ssh client
  config; never ``shadow``, host keys or ``sudoers``; one copy a host,
  :func:`shared_etc`) with an ``/etc/passwd`` and ``/etc/group``
  naming the job's user, for a playbook step Sluice's virtualenv
  and the two packages its Ansible plugins import, and the repositories of
  the build's own projects in the repo cache (the checkouts borrow their
  objects). A fresh ``/proc``, ``/dev``, ``/tmp`` and ``/var/tmp``.
* **Writable**: its workspace and ``executor.sandbox_writable``; the log
  folder for files of its own, never ``job-output.txt`` nor ``vars.json``
  (the executor's, in sticky folders); the ``content/`` copies that
  trusted and secret-holding steps run from are read-only.
* **Who it is**: uid and gid :data:`JOB_UID` inside a user namespace of
  its own, with no capability in any namespace and no nested user
  namespace. Run as root, the executor maps that uid to a host uid of the
  build's own (:func:`host_uid`), so the job owns nothing on the host but
  what the executor hands it (:func:`hand_over`), and its process limit
  counts its own processes only. Run as another user, bubblewrap maps the
  job to that user (the best it can do without root).
* **Namespaces**: its own PID, IPC, UTS and mount namespaces, a network
  namespace with only loopback (``executor.sandbox_network`` opens the
  host network to the steps of a build with nodes, or to every step), a
  new session (no ``TIOCSTI`` into a terminal), and it dies with its
  reaper. A root executor's untrusted steps of one build share its user
  and network namespaces (:class:`BuildNamespaces`, made once); a trusted
  or secret-holding step gets both anew.
* **Limits** (:class:`SandboxLimits`, ``executor.sandbox_limits``):
  processes, memory and file size per process, open files; no core dumps.

The reaper (``reaper.py``) starts ``SANDBOX LIMITS bwrap ... -- EXECUTABLE``:
it makes the user namespace, sets the limits, then starts bubblewrap, so
timeouts, cancels and the clean-up of a step's tree work as without one.
"""

from __future__ import annotations

import errno
import fcntl
import functools
import hashlib
import os
import shutil
import socket
import stat
import subprocess
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from scheduler.settings.sections import SandboxLimits
from workers.executor import forkserver
from workers.executor.errors import RefusedError, WorkspaceError
from workers.executor.reaper import (
    SANDBOX,
    STAGED_BIND,
    STAGED_RO_BIND,
    UNSHARE_NET,
    USERNS_FD,
)
from workers.executor.workspace import BuildLayout
from workers.merger.cache import readable_by_all

# The uid and gid a job has inside its sandbox, and its user's name.
JOB_UID = 1000
JOB_USER = "sluice"
# Host uids of jobs of a root executor: one a build, in [BASE, BASE + SPAN).
HOST_UID_BASE = 1 << 30
HOST_UID_SPAN = 1 << 24
# The system folders a job sees, read-only (a link among them stays a link).
SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# The entries of /etc a job sees, read-only: what programs need to run,
# resolve names, speak TLS and SSH, and nothing that holds a secret.
ETC = (
    "alternatives",
    "ca-certificates",
    "ca-certificates.conf",
    "debian_version",
    "environment",
    "gai.conf",
    "gitconfig",
    "host.conf",
    "hostname",
    "hosts",
    "inputrc",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "locale.alias",
    "localtime",
    "mime.types",
    "nsswitch.conf",
    "os-release",
    "profile",
    "protocols",
    "python3",
    "python3.11",
    "python3.12",
    "python3.13",
    "resolv.conf",
    "services",
    "shells",
    "ssh/ssh_config",
    "ssh/ssh_config.d",
    "ssl/certs",
    "ssl/openssl.cnf",
    "timezone",
)
# The users a job knows: itself (its HOME is the build's, from the environment).
PASSWD = (
    "root:x:0:0:root:/root:/usr/sbin/nologin\n"
    f"{JOB_USER}:x:{JOB_UID}:{JOB_UID}:Sluice job:/nonexistent:/bin/sh\n"
    "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
)
GROUP = f"root:x:0:\n{JOB_USER}:x:{JOB_UID}:\nnogroup:x:65534:\n"
# bwrap's own binds, for an executor that is not root (its job is its user)
RW = ("--ro-bind", "--bind")
# What kernels without user namespaces for root say, and where to look.
USERNS_SYSCTL = "user.max_user_namespaces"


def limits_directive(limits: SandboxLimits) -> list[str]:
    """The reaper's resource limits (``reaper.enter_sandbox``); no core dumps ever."""
    pairs = [
        ("nproc", limits.processes),
        ("as", limits.memory_mb << 20),
        ("fsize", limits.file_size_mb << 20),
        ("nofile", limits.open_files),
    ]
    return [f"{name}={value}" for name, value in pairs if value > 0] + ["core=0"]


def bwrap_path() -> str:
    found = _which_bwrap()
    if found is None:
        raise WorkspaceError(
            "executor.sandbox is bwrap but bubblewrap is not installed (Debian: bubblewrap)"
        )
    return found


@functools.cache
def _which_bwrap() -> str | None:
    return shutil.which("bwrap")


@functools.cache
def require_user_namespaces() -> None:
    """Raise :class:`RefusedError` (one line, naming the sysctl) where bwrap cannot run jobs.

    The sandbox needs a user namespace for every step; a kernel built
    without them, or with ``user.max_user_namespaces`` 0, cannot give one,
    and a job would run as the worker's user: the build is refused
    (``ERROR``, a retry cannot help). Checked by trying, once a process
    (a failure is checked again next time).
    """
    bwrap = bwrap_path()
    probe = [bwrap, "--unshare-user", "--ro-bind", "/", "/", "--", "/bin/true"]
    try:
        ran = subprocess.run(probe, capture_output=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RefusedError(f"executor.sandbox is bwrap but bubblewrap cannot run: {exc}") from None
    if ran.returncode != 0:
        said = ran.stderr.decode(errors="replace").strip().splitlines()[-1:] or ["no message"]
        raise RefusedError(
            "executor.sandbox is bwrap but this kernel gives no user namespace "
            f"({said[0]}): set sysctl {USERNS_SYSCTL} above 0 (and "
            "kernel.unprivileged_userns_clone=1 where it exists), or set executor.sandbox: none"
        )


def host_uid(build_uuid: str) -> int | None:
    """The host uid (and gid) of the build's job processes; None for a non-root executor.

    Derived from the build's uuid, so every step of a build is the same
    user and two builds are (all but surely) two users.
    """
    if os.geteuid() != 0:
        return None
    digest = hashlib.blake2b(build_uuid.encode(), digest_size=8).digest()
    return HOST_UID_BASE + int.from_bytes(digest, "big") % HOST_UID_SPAN


@functools.cache
def installation() -> tuple[Path, ...]:
    """What of Sluice's installation a job sees: its interpreters and two packages.

    A playbook step runs ``ansible-playbook`` from the virtualenv with
    plugins that import ``workers`` and ``scheduler``; the rest of the
    source tree (a state dir, a ``sluice.yaml`` beside it) stays out.
    """
    source = Path(__file__).resolve().parents[2]
    found = [Path(sys.prefix), Path(sys.base_prefix)]
    found += [source / "workers", source / "scheduler"]
    system = [Path(folder) for folder in SYSTEM]
    kept = (p for p in found if not any(_inside(p, f) for f in system) and p.exists())
    return tuple(dict.fromkeys(kept))


@dataclass(frozen=True)
class Sandbox:
    """The sandbox of one build's steps (see the module docstring).

    ``readable`` are the repositories of the build's projects in the repo
    cache; ``hidden`` are files and folders no job may read (``sluice.yaml``
    and the keys it names) wherever a bound folder would show them.
    """

    layout: BuildLayout
    uid: int | None
    # the worker's state dir: empty wherever a bound folder would show it
    state_dir: Path
    readable: tuple[Path, ...] = ()
    writable: tuple[Path, ...] = ()
    hidden: tuple[Path, ...] = ()
    # the executor's files a job that is the executor's user reads and must not
    # change (trusted content, Ansible's config): bound read-only over themselves
    read_only: tuple[Path, ...] = ()
    limits: SandboxLimits = field(default_factory=SandboxLimits)

    def prefix(
        self, *, network: bool = False, own: Path | None = None, playbook: bool = True
    ) -> list[str]:
        """The argv that runs an executable inside the sandbox (ends with ``--``).

        ``network`` shares the host's network; ``own`` is a folder of the
        executor's this step alone writes (a trusted step's ``step/<label>``);
        ``playbook``: the step runs ``ansible-playbook``, which needs Sluice's
        installation (:func:`installation`); another step sees none of it.
        """
        etc = shared_etc(self.state_dir)
        directive = limits_directive(self.limits)
        if self.uid is not None:
            directive.insert(0, f"userns={JOB_UID}:{self.uid}")
        argv = self._namespaces(network)
        argv += _system()
        argv += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--tmpfs", "/var/tmp"]
        # staged: bound by the reaper (as root) where the job's user can reach them
        read, write = (STAGED_RO_BIND, STAGED_BIND) if self.uid is not None else RW
        argv += [_staged(read, etc), str(etc), "/etc"]
        layout = self.layout
        for path in self.writable:
            if path.is_dir():
                argv += [write, str(path), str(path)]
        tools = installation() if playbook else ()
        bound = [*tools, *self.writable]
        covered = self._covered(bound)
        for path in covered:  # other builds, the database, the stack's files
            argv += ["--tmpfs", str(path)]
        sources = [p for p in self.readable if p.exists()]  # an executor elsewhere lacks some
        for path in [*tools, *sources]:
            argv += [_staged(read, path), str(path), str(path)]
        bound += self.readable
        argv += [write, str(layout.root), str(layout.root)]
        argv += [write, str(layout.log_dir), str(layout.log_dir)]
        if self.uid is None:
            argv += self._kept_by_binds(own)
        argv += _hide(self.hidden, bound, self.uid)
        # the folders bwrap made for its binds (/etc, /var...), what covers the state dir
        for top in ["/", *map(str, covered)]:
            argv += ["--remount-ro", top]
        return [SANDBOX, ",".join(directive), *argv, "--"]

    def _namespaces(self, network: bool) -> list[str]:
        """bwrap, its user (see the module docstring) and namespaces."""
        argv = [bwrap_path(), "--die-with-parent", "--new-session", "--cap-drop", "ALL"]
        if self.uid is None:
            argv += ["--unshare-user", "--disable-userns"]
        else:
            argv += ["--userns", USERNS_FD]
        argv += ["--uid", str(JOB_UID), "--gid", str(JOB_UID)]
        argv += ["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--hostname", "sluice-job"]
        if network:
            return argv
        # as root, the reaper joins the build's network namespace, or has bwrap make one
        return [*argv, "--unshare-net" if self.uid is None else UNSHARE_NET]

    def _covered(self, bound: Sequence[Path]) -> list[Path]:
        """The state dir and the folder of all workspaces where a bound folder shows them."""
        private = [self.layout.root.parent, self.state_dir]
        covered = [p for p in private if any(_inside(p, b) for b in bound)]
        return [p for p in covered if not any(p != o and _inside(p, o) for o in covered)]

    def _kept_by_binds(self, own: Path | None) -> list[str]:
        """The executor's files, kept from a job that is the executor's own user by binds.

        A root executor's job owns none of them, in a sticky folder: no bind needed.
        """
        layout = self.layout
        mine = (layout.root / "secrets", layout.root / "step", layout.vars_file)
        argv: list[str] = []
        for path in (layout.log_file, *mine, *self.read_only):
            argv += ["--ro-bind", str(path), str(path)]
        if own is not None:
            argv += ["--bind", str(own), str(own)]
        return argv


@dataclass
class BuildNamespaces:
    """The user namespace (and network namespace, but for a build on the host's network)
    the untrusted steps of one build share: made once when the build starts.

    A step's namespaces hold nothing of its own after it: its whole tree is
    gone, with every socket it listened on; the job's user has no
    capability in them (so no route, filter or setting of the network
    namespace to change). A trusted step, or one a secret is bound to, still
    gets namespaces of its own (a loopback no untrusted step ever saw, no
    keyring an untrusted step filled).
    """

    fds: tuple[int, ...]

    def close(self) -> None:
        for fd in self.fds:
            os.close(fd)
        self.fds = ()


def build_namespaces(uid: int | None, *, host_network: bool) -> BuildNamespaces | None:
    """The namespaces of a build whose job is host uid ``uid`` (on the host's network or not).

    None for an executor that is not root (bwrap makes them each step), or
    when the zygote could not make them: each step then makes its own.
    """
    if uid is None:
        return None
    try:
        fds = forkserver.build_namespaces(JOB_UID, uid, network=not host_network)
    except forkserver.ZygoteError:
        return None
    return BuildNamespaces(tuple(fds)) if fds else None


def prepare(sandbox: Sandbox) -> None:
    """Make the executor's folders a step needs and hand the job its own."""
    layout = sandbox.layout
    for folder in (layout.root / "secrets", layout.root / "step"):
        # made before any step could make them, or kept (emptied) from the last
        # build of a recycled workspace, whose job could not replace them
        folder.mkdir(mode=0o711, exist_ok=True)
        info = os.lstat(folder)
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
            raise WorkspaceError(f"{folder} is not the executor's folder")
        os.chmod(folder, 0o711)
    for made in (layout.log_file, layout.vars_file, layout.result_file):
        if not os.path.lexists(made):
            made.parent.mkdir(parents=True, exist_ok=True)
            made.touch()
    layout.log_dir.chmod(0o1777)  # files of the job's own; job-output.txt stays ours
    hand_over(layout, sandbox.uid)


def hand_over(layout: BuildLayout, uid: int | None) -> None:
    """Make the job's folders its own: ``src``, ``home``, ``tmp``, its result file.

    The workspace's root stays the executor's, sticky and open to all (a job
    may add files and folders of its own there, as Zuul's ``work_root``
    allows); what the executor put there (``content/``, ``secrets/``,
    ``step/``, ``ansible/``) and ``vars.json`` stay the
    executor's: a job cannot replace them, or a file a trusted step runs.
    """
    if uid is None:
        return
    # the job may add entries beside ours, never rename or remove ours (sticky)
    os.chmod(layout.root, 0o1777)
    for top in (layout.src_dir, layout.home_dir, layout.tmp_dir):
        _give_tree(top, uid)
    # sticky too: the job replaces its result file (zuul_return renames over
    # it), never vars.json, which a later (trusted) step reads
    os.chmod(layout.result_file.parent, 0o1777)
    os.lchown(layout.result_file, uid, uid)
    # the job reads (and runs) these, never writes them, whatever the worker's umask
    for top in (layout.root / "content", layout.vars_file, layout.root / "nodes.json"):
        readable_by_all(top)


def give(path: Path, uid: int | None) -> None:
    """One file (or folder) the executor made for the job: the job's to read and write."""
    if uid is not None:
        os.lchown(path, uid, uid)


def _give_tree(top: Path, uid: int) -> None:
    """``top`` and all under it the job's, never through a link (each entry is
    another's: the last build's user, or the executor: no need to look first)."""
    try:
        os.lchown(top, uid, uid)
        fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):  # none, a file, a link
            return
        raise
    try:
        _give_folder(fd, uid)
    finally:
        os.close(fd)


def _give_folder(fd: int, uid: int) -> None:
    with os.scandir(fd) as scan:
        entries = list(scan)
    for entry in entries:
        os.chown(entry.name, uid, uid, dir_fd=fd, follow_symlinks=False)
        if entry.is_dir(follow_symlinks=False):
            flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
            inner = os.open(entry.name, flags, dir_fd=fd)
            try:
                _give_folder(inner, uid)
            finally:
                os.close(inner)


@functools.cache
def _system() -> tuple[str, ...]:
    argv: list[str] = []
    for path in SYSTEM:
        if os.path.islink(path):
            argv += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            argv += ["--ro-bind", path, path]
    return tuple(argv)


@functools.cache
def shared_etc(state_dir: Path) -> Path:
    """The host's copy of the :data:`ETC` entries, bound as a job's ``/etc``.

    One bind instead of one per entry: bubblewrap reads the mount table
    again for every bind, so a step with fifty binds cost it some 20 ms of
    CPU. The copy (some 700 files and links, 0.4 s of CPU to make) is made
    once per host and what it copies, named by a digest of the entries'
    names, kinds, sizes, times and link targets
    (``sandbox/etc-<host>-<digest>``): every worker process of the host
    binds the same one, and a process started after a certificate changed
    makes a new one. A process finds its copy once (a certificate installed
    later reaches its jobs when the worker restarts) and records itself
    among the copy's users (``etc-<host>-<digest>.users/<pid>``); a copy
    that no live process uses is removed by the next process that looks.
    All of it under one lock (``sandbox/etc.lock``), so two processes never
    make the same copy or remove one that the other is about to bind.
    """
    folder = state_dir / "sandbox"
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    prefix = f"etc-{socket.gethostname()}-"
    etc = folder / f"{prefix}{_etc_digest()}"
    users = etc.with_name(etc.name + ".users")
    lock = os.open(folder / "etc.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        _remove_unused_etc(folder, prefix, keep=etc)
        if not etc.is_dir():
            _copy_etc(etc)
        users.mkdir(mode=0o700, exist_ok=True)
        (users / str(os.getpid())).touch()
    finally:
        os.close(lock)  # releases the lock
    return etc


def _etc_digest() -> str:
    """A digest of what :func:`_copy_etc` would copy: names, kinds, sizes, times, link targets."""
    digest = hashlib.sha256(PASSWD.encode() + GROUP.encode())
    for name in ETC:
        source = Path("/etc") / name
        tops = [(str(source), [], [])] if not source.is_dir() else os.walk(source)
        for top, folders, files in tops:
            folders.sort()
            for path in [top, *(os.path.join(top, f) for f in sorted(files + folders))]:
                try:
                    info = os.lstat(path)
                except OSError:
                    digest.update(f"{path}\0missing\n".encode())
                    continue
                link = os.readlink(path) if stat.S_ISLNK(info.st_mode) else ""
                line = f"{path}\0{info.st_mode}\0{info.st_size}\0{info.st_mtime_ns}\0{link}\n"
                digest.update(line.encode("utf-8", "surrogateescape"))
    return "d" + digest.hexdigest()[:20]


def _copy_etc(etc: Path) -> None:
    """Make the copy in a folder of this process's own and rename it to ``etc``."""
    draft = etc.with_name(f"{etc.name}.draft-{os.getpid()}")
    shutil.rmtree(draft, ignore_errors=True)
    draft.mkdir(mode=0o755)
    for name in ETC:
        source, target = Path("/etc") / name, draft / name
        target.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, target, symlinks=True)
        elif source.is_file():  # a link (resolv.conf) copied as what it points to
            shutil.copyfile(source, target)
    (draft / "passwd").write_text(PASSWD)
    (draft / "group").write_text(GROUP)
    readable_by_all(draft)
    draft.rename(etc)


def _remove_unused_etc(folder: Path, prefix: str, *, keep: Path) -> None:
    """Remove this host's copies that no live process uses (but ``keep``) and stale drafts.

    Called under the lock: no other process is making a draft.
    """
    for entry in folder.glob(f"{prefix}*"):
        name, _, kind = entry.name.removeprefix(prefix).partition(".")
        if kind.startswith("draft-"):
            shutil.rmtree(entry, ignore_errors=True)
        elif not kind and not _etc_in_use(entry, name) and entry != keep:
            shutil.rmtree(entry, ignore_errors=True)
            shutil.rmtree(entry.with_name(entry.name + ".users"), ignore_errors=True)


def _etc_in_use(copy: Path, name: str) -> bool:
    """Whether a live process uses ``copy``; forgets the users that are gone."""
    if name.isdigit():  # one process's own copy, as older workers made them
        return os.path.exists(f"/proc/{name}")
    users = copy.with_name(copy.name + ".users")
    alive = False
    for user in users.iterdir() if users.is_dir() else ():
        if user.name.isdigit() and os.path.exists(f"/proc/{user.name}"):
            alive = True
        else:
            user.unlink(missing_ok=True)
    return alive


def _staged(option: str, path: Path) -> str:
    """``option`` (a staged bind), or bwrap's own bind where any user reaches ``path``."""
    if option not in (STAGED_BIND, STAGED_RO_BIND) or not _open_to_all(str(path.parent)):
        return option
    return "--bind" if option == STAGED_BIND else "--ro-bind"


@functools.lru_cache(maxsize=256)
def _open_to_all(folder: str) -> bool:
    """Whether every user passes through ``folder`` and each folder above it."""
    while True:
        try:
            info = os.stat(folder)
        except OSError:
            return False
        if not info.st_mode & 0o001:
            return False
        if folder == "/":
            return True
        folder = os.path.dirname(folder)


def _inside(path: Path, folder: Path) -> bool:
    """``path.is_relative_to(folder)`` for absolute, normal paths, without pathlib's parsing."""
    inner, outer = str(path), str(folder)
    return inner == outer or inner.startswith(outer.rstrip("/") + "/")


def _hide(paths: Iterable[Path], bound: Sequence[Path], uid: int | None) -> list[str]:
    """Cover each of ``paths`` that a bound folder would show: empty, or an empty folder.

    A path the job's user could not reach anyway (a folder above it lets
    only its owner through) is left as it is: bubblewrap, as that user,
    could not reach it to cover it either.
    """
    argv: list[str] = []
    for path in paths:
        outer = next((b for b in bound if _inside(path, b)), None)
        if outer is None or not path.exists() or not _passable(outer, path, uid):
            continue
        if path.is_dir():
            argv += ["--tmpfs", str(path)]
        else:
            argv += ["--ro-bind", "/dev/null", str(path)]
    return argv


def _passable(outer: Path, path: Path, uid: int | None) -> bool:
    """Whether the job's user passes through every folder from ``outer`` down to ``path``."""
    if uid is None:
        return True  # the job is the worker's user
    folder = path.parent
    while folder.is_relative_to(outer):
        info = folder.stat()
        if info.st_uid != uid and not info.st_mode & 0o001:
            return False
        if folder == outer:
            break
        folder = folder.parent
    return True
