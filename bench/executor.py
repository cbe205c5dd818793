"""Build lifecycles per second for no-op jobs, beside the bare request lifecycle.

Starts its own ZooKeeper (Debian's package) on a free port and a small git
repository whose job is ``run.sh`` running ``true``, then measures in
alternating slices of the same run:

* **build**: submit a build request (params: a frozen job and its build's
  context, the BuildSpec), then
  :func:`workers.executor.service.execute_request` (claim, workspace checked
  out from the repository, run ``true`` under the reaper, complete with the
  BuildResult and its events), then read the result: everything a build task
  does except the Celery round trip;
* **request**: the ZooKeeper layer's own lifecycle, submit + claim + complete
  + get_result with no build at all.

Prints both rates and their ratio (the cost of a build over its ZooKeeper
bookkeeping), and each side's CPU per lifecycle: this process's (the
client, the runner) and its child processes' (git, the step's zygote and
the reapers it forks, bubblewrap, the job). The reapers are the zygote's
children, not ours: their CPU is read from the zygote's ``/proc`` entry
(its own and its reaped children's), as ``os.times`` counts ours. Jobs
run in bubblewrap, the executor's default (``--sandbox none`` to compare); a
build runs ``run.sh`` once, or ``--steps`` times (what each further step
costs). ``--floor`` measures two more sides in the same slices, what no
build can go below: ``true`` started and waited for (``posix_spawn``), and
``true`` in bubblewrap's least sandbox (user, PID, IPC, UTS, network and
mount namespaces, ``/usr``, ``/proc``, ``/dev``). ``--pieces`` measures
only the sandbox, part by part: ``true`` in bubblewrap with one more part
of a step's sandbox at each rung, and (as root) the step zygote's forks
(``bench/_forks.py``, the zygote's interpreter and imports), the build's
user and network namespaces and the reaper's staging of its binds. The *host* column is the
whole host's CPU over each side's slices (``/proc/stat``): ZooKeeper and the
kernel's threads (a network namespace is torn down in a kernel worker)
included, so it is read on a quiet host. Not run in CI:
``.venv/bin/python bench/executor.py [--seconds 5] [--sandbox none]
[--build-dir tmpfs] [--steps 1] [--floor] [--pieces]``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _slices import Side

from cli.stack import process
from cli.stack.process import start_on_free_port
from cli.stack.zookeeper import ZooKeeperServer
from scheduler.config.freeze import FrozenJob
from scheduler.config.model import Playbook
from scheduler.settings.sections import ZooKeeperSettings
from scheduler.stores.job_requests import JobRequest, JobRequestQueue
from scheduler.zk import paths
from scheduler.zk.client import ZooKeeperClient, connect
from workers.claims import Delivery
from workers.executor import BuildContext, BuildSpec, RunnerOptions, forkserver
from workers.executor.sandbox import bwrap_path
from workers.executor.service import execute_request

# A benchmark killed from outside leaves no ZooKeeper or Redis behind.
process.children_die_with_parent()

RESULTS = paths.pipeline_result_queue("bench", "check")
SLICE = 0.5  # seconds per slice; a build takes a few tens of ms
# --pieces: the binds of a step's shape (option, folder, where: "" for the same path)
SHAPE = [
    ("--ro-bind", "etc", "/etc"),
    ("--ro-bind", "repo", ""),
    ("--bind", "workspace", ""),
    ("--bind", "logs", ""),
]


def git_env(home: Path) -> dict[str, str]:
    return {
        "PATH": os.environ.get("PATH", os.defpath),
        "HOME": str(home),
        "LANG": "C",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_AUTHOR_NAME": "Bench",
        "GIT_AUTHOR_EMAIL": "bench@example.invalid",
        "GIT_COMMITTER_NAME": "Bench",
        "GIT_COMMITTER_EMAIL": "bench@example.invalid",
    }


def small_repo(base: Path) -> tuple[Path, str]:
    """A repository with a few files and ``run.sh`` (``true``); its path and HEAD."""
    repo = base / "project"
    repo.mkdir(parents=True)
    env = git_env(base)

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=repo, env=env, capture_output=True, check=True)
        return done.stdout.decode().strip()

    git("init", "--quiet", "--initial-branch=main")
    for i in range(10):
        (repo / f"file{i}.txt").write_text(f"line {i}\n")
    script = repo / "run.sh"
    script.write_text("#!/bin/sh\nexec true\n")
    script.chmod(0o755)
    git("add", "-A")
    git("commit", "--quiet", "-m", "bench")
    return repo, git("rev-parse", "HEAD")


def zygote_cpu() -> tuple[int | None, float]:
    """This process's zygote and its CPU seconds so far, its reaped children's included."""
    pid = forkserver.zygote_pid()
    if pid is None:
        return None, 0.0
    try:
        fields = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()
    except OSError:
        return None, 0.0
    # utime, stime, cutime, cstime: fields 14 to 17 of proc(5), [11:15] after the name
    return pid, sum(int(value) for value in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def host_busy() -> float:
    """Seconds of CPU the whole host spent so far (every process and kernel thread, no idle)."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(f) for f in fields[:8])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def compare(seconds: float, ops: list[Callable[[], None]]) -> list[Side]:
    """Lifecycles of each of ``ops``, measured in alternating slices."""
    for _ in range(5):  # warm up: queue directories, the server, page cache
        for op in ops:
            op()
    sides = [Side() for _ in ops]
    hosts = [0.0 for _ in ops]
    while sum(side.wall for side in sides) < len(ops) * seconds:
        for index, (side, op) in enumerate(zip(sides, ops, strict=True)):
            zygote_before = zygote_cpu()
            host_before = host_busy()
            before, started = os.times(), time.perf_counter()
            while time.perf_counter() - started < SLICE:
                op()
                side.count += 1
            after = os.times()
            hosts[index] += host_busy() - host_before
            zygote_after = zygote_cpu()
            if zygote_after[0] is not None:  # a new zygote: all of its CPU is this slice's
                same = zygote_after[0] == zygote_before[0]
                side.cpu_children += zygote_after[1] - (zygote_before[1] if same else 0.0)
            side.wall += time.perf_counter() - started
            side.cpu_self += after.user + after.system - before.user - before.system
            side.cpu_children += (
                after.children_user
                + after.children_system
                - before.children_user
                - before.children_system
            )
    for side, host in zip(sides, hosts, strict=True):
        side.cpu_host = host
    return sides


def build_lifecycle(
    client: ZooKeeperClient,
    repo: Path,
    commit: str,
    options: RunnerOptions,
    *,
    sandbox: str,
    steps: int,
) -> Callable[[], None]:
    queue = JobRequestQueue(client, paths.executor_queue())
    options = replace(options, sandbox=sandbox)

    def op() -> None:
        build_uuid = uuid.uuid4().hex
        run = (Playbook("run.sh", "org/project", "main", False),) * steps
        spec = BuildSpec(
            FrozenJob("noop", "org/project", "main", "check", run=run),
            BuildContext(
                tenant="bench",
                build_uuid=build_uuid,
                repo_state={"org/project": {"main": commit}},
                sources={"org/project": str(repo)},
            ),
        )
        request = JobRequest(build_uuid, job_name="noop", result_queue=RESULTS)
        queue.submit(request, spec.to_dict())
        report = execute_request(queue, build_uuid, "bench-executor", options)
        assert report.outcome is Delivery.COMPLETED, report
        result = queue.get_result(build_uuid)
        assert result is not None and result.result["result"] == "SUCCESS", result

    return op


def spawn(argv: list[str]) -> Callable[[], None]:
    """Start ``argv`` (posix_spawn, as the reaper starts a step) and wait for it."""

    def op() -> None:
        pid = os.posix_spawn(argv[0], argv, {"PATH": "/usr/bin:/bin"})
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0, argv

    return op


def least_bwrap() -> list[str]:
    """bubblewrap's least sandbox, up to the command: user, PID, IPC, UTS, network and mount
    namespaces, ``/usr`` and its links, a ``/proc`` and a ``/dev``."""
    return [*_bwrap_namespaces(), "--proc", "/proc", "--dev", "/dev"]


def _bwrap_namespaces() -> list[str]:
    """bwrap with its namespaces and the system folders, nothing else."""
    argv = [bwrap_path(), "--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts"]
    argv += ["--unshare-net", "--die-with-parent", "--new-session", "--ro-bind", "/usr", "/usr"]
    for name in ("bin", "sbin", "lib", "lib64"):
        if os.path.islink(f"/{name}"):
            argv += ["--symlink", os.readlink(f"/{name}"), f"/{name}"]
    return argv


def bwrap_ladder(folder: Path) -> list[tuple[str, list[str]]]:
    """``true`` bare, then in bubblewrap with one more part of a step's sandbox at each rung.

    ``folder`` holds the folders the last rung binds in the shape of a
    step's (:data:`SHAPE`: ``/etc``, a repository, the workspace, the log
    folder).
    """
    true = ["--", "/usr/bin/true"]
    shape = ["--tmpfs", "/tmp", "--tmpfs", "/var/tmp"]
    for option, name, dest in SHAPE:
        shape += [option, str(folder / name), dest or str(folder / name)]
    shape += ["--remount-ro", "/"]
    namespaces = _bwrap_namespaces()
    least = least_bwrap()
    return [
        ("true, started and waited for", ["/usr/bin/true"]),
        (
            "bwrap: a user namespace, / read-only",
            [bwrap_path(), "--unshare-user", "--ro-bind", "/", "/", *true],
        ),
        ("+ /usr; PID, IPC, UTS, network namespaces", [*namespaces, *true]),
        ("+ a fresh /proc", [*namespaces, "--proc", "/proc", *true]),
        ("+ /dev: bubblewrap's least sandbox", [*least, *true]),
        ("+ 2 tmpfs, 4 binds, / read-only: a step's", [*least, *shape, *true]),
    ]


def forks(folder: Path) -> tuple[subprocess.Popen[bytes], list[tuple[str, Callable[[], None]]]]:
    """The zygote's stand-in (bench/_forks.py) and its lifecycles."""
    helper = subprocess.Popen(
        [sys.executable, "-I", "-S", str(Path(__file__).parent / "_forks.py"), str(folder)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert helper.stdin is not None and helper.stdout is not None
    ask, answer = helper.stdin.fileno(), helper.stdout.fileno()

    def lifecycle(code: bytes) -> Callable[[], None]:
        def op() -> None:
            os.write(ask, code)
            if os.read(answer, 1) != b"0":
                raise RuntimeError(f"bench/_forks.py failed its {code!r} lifecycle")

        return op

    named = [
        ("a fork of the zygote, exiting", b"f"),
        ("the build's user namespace (zygote)", b"u"),
        ("its user and network namespaces (zygote)", b"n"),
        ("a fork staging 4 binds (the reaper's)", b"s"),
    ]
    return helper, [(name, lifecycle(code)) for name, code in named]


def pieces(seconds: float) -> None:
    """``--pieces``: the host's CPU for each part of a step's sandbox, alternating."""
    with tempfile.TemporaryDirectory(prefix="sluice-bench-") as tmp:
        for _option, name, _dest in SHAPE:
            (Path(tmp) / "shape" / name).mkdir(parents=True)
        ladder = [(name, spawn(argv)) for name, argv in bwrap_ladder(Path(tmp) / "shape")]
        helper, forked = (
            forks(Path(tmp) / "shape" / "workspace") if os.geteuid() == 0 else (None, [])
        )
        try:
            named = [*ladder, *forked]
            sides = compare(seconds, [op for _name, op in named])
        finally:
            if helper is not None:
                helper.communicate()
    print(f"{'lifecycle':44} {'per s':>7} {'host CPU ms':>12}")
    for (name, _op), side in zip(named, sides, strict=True):
        print(f"{name:44} {side.rate:7.1f} {side.ms(side.cpu_host):12.2f}")
    if not forked:
        print("(not root: the namespaces and staging of a root executor are not measured)")
    print(
        "host CPU: the whole host's over each side's slices, kernel threads (tear-downs) included"
    )


def request_lifecycle(client: ZooKeeperClient) -> Callable[[], None]:
    queue = JobRequestQueue(client, paths.executor_queue("raw"))

    def op() -> None:
        request = JobRequest(uuid.uuid4().hex, job_name="noop", result_queue=RESULTS)
        queue.submit(request, {"vars": {}})
        claimed = queue.claim(request.uuid, "bench-executor")
        assert claimed is not None
        queue.complete(claimed, {"result": "SUCCESS"})
        assert queue.get_result(request.uuid) is not None

    return op


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="per side")
    parser.add_argument("--sandbox", choices=("none", "bwrap"), default="bwrap")
    parser.add_argument(
        "--build-dir",
        choices=("state", "tmpfs"),
        default="state",
        help="workspaces under the state dir or on /dev/shm (executor.build_dir)",
    )
    parser.add_argument("--steps", type=int, default=1, help="run steps a build")
    parser.add_argument(
        "--floor",
        action="store_true",
        help="also measure what no build can go below: `true` started and waited for, and "
        "`true` in bubblewrap's least sandbox",
    )
    parser.add_argument(
        "--pieces",
        action="store_true",
        help="only the sandbox piece by piece: bubblewrap with one more part at each rung, "
        "the zygote's forks, the build's namespaces, the reaper's staging (host CPU)",
    )
    args = parser.parse_args()
    if args.pieces:
        pieces(args.seconds)
        return
    with (
        tempfile.TemporaryDirectory(prefix="sluice-bench-") as tmp,
        tempfile.TemporaryDirectory(prefix="sluice-bench-builds-", dir="/dev/shm") as shm,
    ):
        base = Path(tmp)
        repo, commit = small_repo(base / "repos")
        build_dir = Path(shm) / "builds" if args.build_dir == "tmpfs" else None
        options = RunnerOptions(state_dir=base / "state", build_dir=build_dir)
        server = start_on_free_port(
            lambda port: ZooKeeperServer(data_dir=base / "zookeeper", port=port), timeout=60
        )
        try:
            client = connect(ZooKeeperSettings(hosts=server.hosts, root="/bench-root"))
            try:
                ops = [
                    build_lifecycle(
                        client, repo, commit, options, sandbox=args.sandbox, steps=args.steps
                    ),
                    request_lifecycle(client),
                ]
                if args.floor:
                    least = [*least_bwrap(), "--", "/usr/bin/true"]
                    ops += [spawn(["/usr/bin/true"]), spawn(least)]
                sides = compare(args.seconds, ops)
            finally:
                client.stop()
                client.close()
        finally:
            server.stop()
    print(f"sandbox: {args.sandbox}, workspaces: {args.build_dir}, steps: {args.steps}")
    header = f"{'lifecycle':44} {'per s':>7} {'ms each':>8} {'CPU ms':>7} {'children':>8}"
    print(header + f" {'host':>6}")
    names = [
        "build (claim, workspace, run true, complete)",
        "request (submit, claim, complete, result)",
        "floor: true, started and waited for",
        "floor: true in bubblewrap's least sandbox",
    ]
    for name, side in zip(names, sides, strict=False):
        print(
            f"{name:44} {side.rate:7.1f} {side.ms(side.wall):8.1f}"
            f" {side.ms(side.cpu_self):7.1f} {side.ms(side.cpu_children):8.1f}"
            f" {side.ms(side.cpu_host):6.1f}"
        )
    builds, raw = sides[0], sides[1]
    ratio = builds.rate / raw.rate
    print(f"ratio build/request: {ratio:.3f} (a build costs {1 / ratio:.1f} requests)")
    print(
        "CPU ms: this process (ZooKeeper client, runner);"
        " children: git, zygote and reapers, sandbox, job;"
        " host: the whole host's (ZooKeeper and the kernel's threads too)"
    )


if __name__ == "__main__":
    main()
