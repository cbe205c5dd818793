"""A stand-in for the step zygote, for ``bench/executor.py --pieces``: forks as it forks.

Run as ``python -I -S bench/_forks.py`` (the zygote's interpreter, flags
and imports: C modules and ``workers/executor/reaper.py``). Each byte read
on stdin is one lifecycle, answered with one byte (``0``: done) on stdout:

* ``f``: a fork that exits at once (what every reaper costs before its work);
* ``u``: the build's user namespace, as the zygote makes it
  (``reaper.user_namespace``: a child of its own), its descriptor closed;
* ``n``: the same with the build's network namespace and its loopback;
* ``s``: a fork that makes the reaper's staging mount namespace with four
  staged binds of the folder given as the first argument, then exits.
"""

import os
import sys

TYPE_CHECKING = False  # as in the zygote: ``typing`` is a costly import
if TYPE_CHECKING:
    from collections.abc import Callable

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "workers", "executor"))
import reaper  # noqa: E402

HOST_UID = (1 << 30) + 1  # in the range of a root executor's job uids (workers/executor/sandbox.py)
JOB_UID = 1000


def _forked(work: "Callable[[], object]") -> None:
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            work()
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    if status != 0:
        raise OSError(f"the forked lifecycle failed ({status})")


def _namespaces(network: bool) -> None:
    for fd in reaper.user_namespace(JOB_UID, HOST_UID, network=network):
        if fd >= 0:
            os.close(fd)


def main(args: list[str]) -> int:
    source = args[0]
    staged = []
    for n in range(4):
        staged += [reaper.STAGED_BIND, source, f"/bench/{n}"]
    lifecycles = {
        b"f": lambda: _forked(lambda: None),
        b"u": lambda: _namespaces(False),
        b"n": lambda: _namespaces(True),
        b"s": lambda: _forked(lambda: reaper.stage(["bwrap", *staged])),
    }
    while True:
        asked = os.read(0, 1)
        if not asked:
            return 0
        lifecycles[asked]()
        os.write(1, b"0")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
