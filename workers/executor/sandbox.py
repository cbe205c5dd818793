"""Running a job's executables in bubblewrap (``executor.sandbox: bwrap``).

A job sees the host read-only and only its own build writable: its
workspace (checkouts, ``HOME``, ``TMPDIR``, vars and result files) and its
log folder. Everything else under the worker's state dir (other builds'
workspaces and logs, the SQL database, the stack's files) is hidden behind
an empty tmpfs; the merger's repo cache stays readable because the
checkouts borrow its objects. The worker's secrets are hidden too:
``sluice.yaml`` and every key, certificate and CA file it names (ZooKeeper
TLS, JWT public keys) read as empty. The job gets its own PID, IPC and UTS
namespaces and dies with the runner.

The virtualenv and the source Sluice runs from stay readable even under
``/tmp`` (:func:`installation`): playbook steps run ansible-playbook from them.

The reaper (``reaper.py``) starts ``bwrap ... -- EXECUTABLE``, so timeouts,
cancels and the clean-up of a step's tree work as without a sandbox.
"""

from __future__ import annotations

import functools
import shutil
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

from workers.executor.errors import WorkspaceError
from workers.executor.workspace import BuildLayout

SANDBOXES = ("none", "bwrap")


def bwrap_path() -> str:
    found = shutil.which("bwrap")
    if found is None:
        raise WorkspaceError(
            "executor.sandbox is bwrap but bubblewrap is not installed (Debian: bubblewrap)"
        )
    return found


@functools.cache
def installation() -> tuple[Path, ...]:
    """Where Sluice runs from: its virtualenv and its source (an editable install).

    A playbook step runs ``ansible-playbook`` from the virtualenv inside the
    sandbox, with plugins that import Sluice; both stay readable even when
    they live under ``/tmp`` (a CI checkout), which the job sees empty. A
    state dir or secret inside them is still hidden (bound later).
    """
    return (Path(sys.prefix), Path(__file__).resolve().parents[2])


def bwrap_prefix(
    layout: BuildLayout,
    state_dir: Path,
    *,
    builds: Path | None = None,
    readable: Iterable[Path] = (),
    writable: Iterable[Path] = (),
    hidden: Iterable[Path] = (),
) -> list[str]:
    """The argv that runs an executable inside the build's sandbox (ends with ``--``).

    ``writable`` folders (``executor.sandbox_writable``) are bound before the
    state dir is hidden, so a writable folder holding the state dir still
    shows none of it. ``builds``, the folder of all workspaces, is hidden
    like the state dir when it lies outside it (``executor.build_dir``).
    """
    argv = [
        bwrap_path(),
        "--die-with-parent",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--ro-bind", "/", "/",
        "--dev", "/dev",
        "--proc", "/proc",
        "--tmpfs", "/tmp",
    ]  # fmt: skip
    for path in installation():
        if path.is_relative_to("/tmp"):  # hidden by the job's own /tmp: shown again
            argv += ["--ro-bind", str(path), str(path)]
    for path in writable:
        if path.is_dir():
            argv += ["--bind", str(path), str(path)]
    argv += ["--tmpfs", str(state_dir)]
    if builds is not None and not builds.is_relative_to(state_dir):
        argv += ["--tmpfs", str(builds)]
    for path in readable:
        if path.exists():
            argv += ["--ro-bind", str(path), str(path)]
    for path in (layout.root, layout.log_dir):
        argv += ["--bind", str(path), str(path)]
    argv += _hide(hidden, state_dir)
    return [*argv, "--"]


def _hide(paths: Iterable[Path], state_dir: Path) -> Sequence[str]:
    argv: list[str] = []
    for path in paths:
        if not path.exists() or path.is_relative_to(state_dir):
            continue  # absent, or already behind the state dir's tmpfs
        if path.is_dir():
            argv += ["--tmpfs", str(path)]
        else:
            argv += ["--ro-bind", "/dev/null", str(path)]
    return argv
