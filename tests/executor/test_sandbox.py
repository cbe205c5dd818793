"""The bubblewrap sandbox: its own user, a minimal root, its own build writable, secrets hidden."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from scheduler.model.results import Result
from scheduler.settings.load import load_settings
from scheduler.settings.sections import SandboxLimits
from tests.executor.helpers import Repo, make_spec, playbook, with_job
from workers.executor import BaseControl, RunnerOptions, run_build, sandbox
from workers.executor.process import reaper_argv
from workers.executor.recycle import spare_of
from workers.executor.sandbox import Sandbox, host_uid, prepare
from workers.executor.service import secret_files
from workers.executor.workspace import BuildLayout, create_folders
from workers.merger.cache import readable_by_all


@pytest.fixture
def secret() -> Iterator[Path]:
    if shutil.which("bwrap") is None:
        pytest.fail("bubblewrap is not installed (make bootstrap installs it)")
    path = Path("/var/tmp") / f"sluice-test-key-{uuid.uuid4().hex}"  # outside /tmp
    path.write_text("PRIVATE KEY\n")
    yield path
    path.unlink()


def run(
    prefix: list[str], *command: str, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """``command`` in the sandbox ``prefix``, under the reaper (which reads its directive)."""
    status_read, status_write = os.pipe()
    try:
        return subprocess.run(
            reaper_argv([*prefix, *command], 1.0, status_write),
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
            cwd=cwd or "/",
            pass_fds=(status_write,),
            env={"PATH": "/usr/bin:/bin"},
        )
    finally:
        os.close(status_read)
        os.close(status_write)


def sandbox_for(layout: BuildLayout, **kwargs: Any) -> Sandbox:
    state = layout.log_dir.parent.parent
    made = Sandbox(layout, host_uid(layout.root.name), state, **kwargs)
    prepare(made)
    return made


def test_secret_files_read_empty_and_only_the_build_is_writable(
    tmp_path: Path, secret: Path
) -> None:
    state = tmp_path / "state"
    layout = BuildLayout.for_build(state, "b1")
    create_folders(layout)
    other = BuildLayout.for_build(state, "b2")
    create_folders(other)
    (other.root / "theirs.txt").write_text("theirs\n")
    prefix = sandbox_for(layout, readable=(secret.parent,), hidden=(secret,)).prefix()
    assert run(prefix, "/bin/cat", str(secret)).stdout == ""
    assert run([], "/bin/cat", str(secret)).stdout == "PRIVATE KEY\n"  # outside, it is there
    assert run(prefix, "/bin/cat", str(other.root / "theirs.txt")).returncode != 0
    mine = layout.root / "home" / "mine.txt"
    assert run(prefix, "/bin/sh", "-c", f"echo mine > {mine}").returncode == 0
    assert mine.read_text() == "mine\n"
    assert run(prefix, "/bin/sh", "-c", f"echo x > {secret}").returncode != 0
    assert secret.read_text() == "PRIVATE KEY\n"


def test_the_job_is_an_unprivileged_user_of_its_own_with_no_network(tmp_path: Path) -> None:
    """uid 1000 inside, the build's own host uid outside, no capability, loopback only."""
    layout = BuildLayout.for_build(tmp_path / "state", "b1")
    create_folders(layout)
    made = sandbox_for(layout)

    def seen(script: str) -> list[str]:
        ran = run(made.prefix(), "/bin/sh", "-c", script)
        assert ran.returncode == 0, ran.stderr
        return ran.stdout.split()

    assert made.uid is not None
    assert seen("id -u; id -g; id -un") == ["1000", "1000", "sluice"]
    assert seen("grep CapEff /proc/self/status") == ["CapEff:", "0000000000000000"]
    assert seen("cat /proc/self/uid_map /proc/self/gid_map") == ["1000", str(made.uid), "1"] * 2
    assert seen("tail -n +3 /proc/net/dev | cut -d: -f1") == ["lo"]
    assert seen("unshare -U true 2>/dev/null && echo nested || echo no-nested") == ["no-nested"]
    assert "root" not in seen("ls /") and "home" not in seen("ls /")
    assert seen("ls /etc | grep -c -e shadow -e sudoers -e ssh_host || true") == ["0"]
    assert seen("grep -c sluice /etc/passwd") == ["1"]
    outside = layout.root / "home" / "made"
    assert run(made.prefix(), "/bin/sh", "-c", f"touch {outside}").returncode == 0
    assert outside.stat().st_uid == made.uid


def test_passwords_and_keys_the_settings_name_are_hidden_from_jobs(tmp_path: Path) -> None:
    """``secret_files``: what a sandboxed job reads as empty (sluice.yaml, the files it names)."""
    for name in ("keystore.password", "broker.password", "flower.users"):
        (tmp_path / name).write_text("hunter2\n")
    config = tmp_path / "sluice.yaml"
    config.write_text(
        "keystore:\n"
        "  password_file: keystore.password\n"
        "broker:\n"
        "  password_file: broker.password\n"
        "flower:\n"
        "  basic_auth_file: flower.users\n"
        "zookeeper:\n"
        "  hosts: 127.0.0.1:2281\n"
        "  tls:\n"
        f"    ca: {tmp_path / 'ca.pem'}\n"
        f"    cert: {tmp_path / 'client.pem'}\n"
        f"    key: {tmp_path / 'client.key'}\n"
    )
    hidden = {p.resolve() for p in secret_files(load_settings(config, environ={}))}
    wanted = {"sluice.yaml", "keystore.password", "ca.pem", "client.pem", "client.key"}
    wanted |= {"broker.password", "flower.users"}
    assert {tmp_path / name for name in wanted} <= hidden


def test_an_installation_under_tmp_stays_readable_and_the_rest_of_its_tree_hidden(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A CI checkout in /tmp: the job's own /tmp is empty, but ansible-playbook runs from it."""
    checkout = Path(tempfile.mkdtemp(prefix="sluice-checkout-", dir="/tmp"))
    try:
        (checkout / "venv" / "bin").mkdir(parents=True)
        tool = checkout / "venv" / "bin" / "tool"
        tool.write_text("#!/bin/sh\necho tool ran\n")
        tool.chmod(0o755)
        checkout.chmod(0o755)
        state = checkout / ".state"
        layout = BuildLayout.for_build(state, "b1")
        create_folders(layout)
        (state / "sluice.sqlite").write_text("history\n")
        monkeypatch.setattr(sandbox, "installation", lambda: (checkout / "venv",))
        prefix = sandbox_for(layout).prefix()
        assert run(prefix, str(tool)).stdout == "tool ran\n"
        assert run(prefix, "/bin/cat", str(state / "sluice.sqlite")).returncode != 0
        run(prefix, "/bin/sh", "-c", f"echo x > {checkout}/new")  # in the job's own /tmp
        assert not (checkout / "new").exists()
        assert run(prefix, "/bin/sh", "-c", f"echo x > {tool}").returncode != 0
        assert run(prefix, "/bin/ls", "/tmp").stdout.split() == [checkout.name]
    finally:
        shutil.rmtree(checkout)


def test_the_installation_is_the_running_virtualenv_and_two_packages() -> None:
    found = sandbox.installation()
    assert any((p / "bin" / "ansible-playbook").exists() for p in found)
    assert {p.name for p in found} >= {"workers", "scheduler"}
    assert not any((p / "pyproject.toml").exists() for p in found)  # never the whole tree


def test_a_build_dir_on_a_shared_tmpfs_is_private_and_hides_other_builds() -> None:
    """``executor.build_dir`` under /dev/shm: the folder is 0700, other workspaces hidden."""
    shm = Path(tempfile.mkdtemp(prefix="sluice-test-", dir="/dev/shm"))
    try:
        state, builds = shm / "state", shm / "builds"
        layout = BuildLayout.for_build(state, "b1", builds)
        assert layout.root == builds / "b1" and layout.log_dir == state / "logs" / "b1"
        create_folders(layout)
        assert builds.stat().st_mode & 0o777 == 0o700
        other = BuildLayout.for_build(state, "b2", builds)
        create_folders(other)
        (other.root / "theirs.txt").write_text("theirs\n")
        prefix = sandbox_for(layout).prefix()
        assert run(prefix, "/bin/cat", str(other.root / "theirs.txt")).returncode != 0
        assert run(prefix, "/bin/ls", str(builds)).stdout.split() == ["b1"]
        mine = layout.root / "home" / "mine.txt"
        assert run(prefix, "/bin/sh", "-c", f"echo mine > {mine}").returncode == 0
        assert mine.read_text() == "mine\n"
    finally:
        shutil.rmtree(shm)


# A parent that is a child subreaper (as init is for the worker) runs sandboxed
# steps under the reaper one after the other, then counts the processes the
# reapers left to it: bubblewrap's PID namespace init outlives bwrap's monitor
# by a moment, and a reaper that exits before reaping it hands it to init.
ORPHANS = """
import ctypes, os, sys
ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
from workers.executor import reaper
argv = sys.argv[2:]
for _ in range(int(sys.argv[1])):
    status_read, status_write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(status_read)
        os._exit(reaper.run(1.0, os.getppid(), status_write, argv, {"PATH": os.defpath}))
    os.close(status_write)
    assert os.read(status_read, 100) == b"exit 0\\n"
    os.waitpid(pid, 0)
    os.close(status_read)
orphans = []
while True:
    try:
        pid, _status = os.waitpid(-1, os.WNOHANG)
    except ChildProcessError:
        break
    if pid == 0:
        break
    orphans.append(pid)
print(len(orphans))
"""


def test_a_sandboxed_step_leaves_no_process_to_init(tmp_path: Path) -> None:
    """The reaper reaps bubblewrap's namespace init too before it exits.

    Left over, it was a zombie for init to collect (an init that never
    reaps, as in a container, would gather one for every fourth step).
    """
    layout = BuildLayout.for_build(tmp_path / "state", "b1")
    create_folders(layout)
    prefix = sandbox_for(layout).prefix()
    script = tmp_path / "orphans.py"
    script.write_text(ORPHANS)
    ran = subprocess.run(
        [sys.executable, str(script), "40", *prefix, "/bin/true"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).resolve().parents[2],
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
        check=False,
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.split() == ["0"]


NO_USERNS = """#!/bin/sh
echo "bwrap: No permissions to create a new namespace, likely because the kernel" \
    "does not allow non-privileged user namespaces." >&2
exit 1
"""


def test_a_kernel_without_user_namespaces_refuses_the_build_naming_the_sysctl(
    tmp_path: Path, repo: Repo, options: RunnerOptions, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No user namespace, no sandboxed build: ERROR (a retry cannot help), one line, the sysctl."""
    fake = tmp_path / "bwrap"
    fake.write_text(NO_USERNS)
    fake.chmod(0o755)
    monkeypatch.setattr(sandbox, "bwrap_path", lambda: str(fake))
    sandbox.require_user_namespaces.cache_clear()
    repo.script("run.sh", "echo ran > /dev/null")
    spec = make_spec(repo, repo.commit(), run=("run.sh",))
    try:
        result = run_build(spec, BaseControl(), replace(options, sandbox="bwrap"))
    finally:
        sandbox.require_user_namespaces.cache_clear()
    assert result.result is Result.ERROR
    assert "user.max_user_namespaces" in result.message and "\n" not in result.message
    assert not result.steps  # nothing ran unconfined


def test_limits_end_a_step_never_the_runner(repo: Repo, options: RunnerOptions) -> None:
    """A fork bomb, a memory hog and a big file each fail their step; the next step runs."""
    limits = SandboxLimits(processes=32, memory_mb=256, file_size_mb=4)
    repo.script("bomb.sh", "bomb() { bomb | bomb & }\nbomb\nsleep 30")
    repo.script("hog.sh", "exec python3 -c 'b = bytearray(1 << 30)'")
    repo.script("big.sh", 'head -c 16M /dev/zero > "$HOME/big"')
    repo.script("after.sh", 'ls -l "$HOME/big"; echo still here')
    spec = make_spec(
        repo, repo.commit(), run=("hog.sh",), post_run=("big.sh", "bomb.sh", "after.sh")
    )
    spec = with_job(spec, post_timeout=5)
    sandboxed = replace(options, sandbox="bwrap", sandbox_limits=limits)
    result = run_build(spec, BaseControl(), sandboxed)
    outcomes = {step.path: (step.outcome.value, step.exit_code) for step in result.steps}
    text = Path(result.log_path).read_text()
    assert outcomes["hog.sh"] == ("failed", 1) and "MemoryError" in text
    assert outcomes["big.sh"][0] == "failed"  # SIGXFSZ
    assert outcomes["bomb.sh"][0] == "timed_out"
    assert outcomes["after.sh"] == ("ok", 0) and "still here" in text
    assert " 4194304 " in text  # the file stopped at the limit


NOT_ROOT = """
import os, subprocess, sys
from pathlib import Path
from workers.executor.process import reaper_argv
from workers.executor.sandbox import Sandbox, host_uid, prepare
from workers.executor.workspace import BuildLayout, create_folders
layout = BuildLayout.for_build(Path(sys.argv[1]), "b1")
create_folders(layout)
made = Sandbox(layout, host_uid("b1"), Path(sys.argv[1]), read_only=(layout.root / "content",))
assert made.uid is None  # not root: the job is the executor's user
prepare(made)
(layout.root / "content").mkdir()
status_read, status_write = os.pipe()
argv = [*made.prefix(), "/bin/sh", "-c", sys.argv[2]]
ran = subprocess.run(reaper_argv(argv, 1.0, status_write), pass_fds=(status_write,),
                     capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"}, cwd="/")
print(ran.stdout, end="")
"""


@contextlib.contextmanager
def searchable_by_all(*paths: Path) -> Iterator[None]:
    """Every folder down to ``paths`` searchable by others while it lasts.

    A checkout (and its virtualenv) under a closed folder (``mktemp -d``)
    is out of reach of another user; an executor that is not root runs
    from an installation its user can read.
    """
    changed: list[tuple[Path, int]] = []
    for path in paths:
        for folder in reversed([path, *path.parents]):
            mode = stat.S_IMODE(folder.stat().st_mode)
            if not mode & stat.S_IXOTH and (folder, mode) not in changed:
                os.chmod(folder, mode | stat.S_IXOTH)
                changed.append((folder, mode))
    try:
        yield
    finally:
        for folder, mode in reversed(changed):
            os.chmod(folder, mode)


def test_an_executor_that_is_not_root_gives_its_jobs_its_own_user(tmp_path: Path) -> None:
    """bwrap maps the job to the executor's user; trusted copies and the log stay read-only."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.fail("this test runs as root (as CI does) with setpriv (util-linux)")
    top = Path(tempfile.mkdtemp(prefix="sluice-not-root-", dir="/tmp"))
    checkout = Path(__file__).resolve().parents[2]
    try:
        os.chown(top, 65534, 65534)
        script = top / "not_root.py"
        script.write_text(NOT_ROOT)
        work = top / "state" / "builds" / "b1"
        probe = (
            "id -u; grep CapEff /proc/self/status;"
            f"touch {work}/home/x && echo home-writable;"
            f"touch {work}/content/x 2>/dev/null || echo content-read-only;"
            f"echo x >> {top}/state/logs/b1/job-output.txt 2>/dev/null || echo log-read-only;"
            "unshare -U true 2>/dev/null || echo no-nested"
        )
        with searchable_by_all(checkout, Path(sys.prefix)):
            ran = subprocess.run(
                ["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups",
                 sys.executable, str(script), str(top / "state"), probe],
                capture_output=True, text=True, timeout=60, check=False,
                cwd=checkout, env={"PATH": os.defpath, "PYTHONPATH": str(checkout)},
            )  # fmt: skip
        assert ran.returncode == 0, ran.stderr
        assert ran.stdout.split() == [
            "1000", "CapEff:", "0000000000000000", "home-writable", "content-read-only",
            "log-read-only", "no-nested",
        ]  # fmt: skip
        assert (work / "home" / "x").stat().st_uid == 65534
    finally:
        shutil.rmtree(top)


def test_a_worker_at_umask_077_still_hands_its_job_what_it_needs(
    repo: Repo, options: RunnerOptions
) -> None:
    """The stack starts workers at umask 077: the job still reads its vars, its repository's
    objects (the merger makes its cache readable: ``readable_by_all``), runs a trusted step
    from its read-only copy with a home of its own."""
    repo.script("run.sh", 'git log -1 --format=%s; cat "$SLUICE_VARS_FILE" >/dev/null && echo vars')
    repo.script("post.sh", 'touch "$HOME/mine" && echo "trusted home $HOME"')
    commit = repo.commit("the change")
    readable_by_all(repo.path)
    post = (playbook("post.sh", trusted=True),)
    spec = make_spec(repo, commit, post_run=post)
    previous = os.umask(0o077)
    try:
        result = run_build(spec, BaseControl(), replace(options, sandbox="bwrap"))
    finally:
        os.umask(previous)
    text = Path(result.log_path).read_text()
    assert result.result is Result.SUCCESS, text
    assert "run | the change" in text and "run | vars" in text
    assert "post-run | trusted home " in text and "/step/post-run-0/home" in text


def test_the_spare_workspace_is_scrubbed_when_the_build_ends(
    repo: Repo, options: RunnerOptions
) -> None:
    """Nothing the job left lives on: no set-id bit, no FIFO, no home; the next build's user
    owns what stays."""
    repo.script(
        "run.sh",
        'src="$SLUICE_SRC_DIR/org/project"; cp /bin/true "$src/suid" && chmod 4755 "$src/suid"\n'
        'mkfifo "$src/fifo"; echo planted > "$HOME/.profile"; ls -l "$src/suid"',
    )
    spec = make_spec(repo, repo.commit())
    result = run_build(spec, BaseControl(), replace(options, sandbox="bwrap"))
    assert result.result is Result.SUCCESS, Path(result.log_path).read_text()
    assert "-rwsr-xr-x" in Path(result.log_path).read_text()  # it did plant one
    spare = spare_of(options.state_dir / "builds")
    found = [Path(folder) / name for folder, dirs, files in os.walk(spare) for name in dirs + files]
    assert found and not any(os.lstat(p).st_mode & 0o6000 for p in found)
    assert not (spare / "src" / "org" / "project" / "fifo").exists()
    assert not list((spare / "home").iterdir())


# A daemon on the build's loopback, as a fake ssh-agent or proxy would be: it
# leaves its step's session and would answer whoever connects.
FAKE_AGENT = """
setsid python3 -c '
import socket
server = socket.create_server(("127.0.0.1", PORT))
while True:
    conn, _ = server.accept()
    conn.sendall(b"FAKE AGENT")
    conn.close()
' </dev/null >/dev/null 2>&1 &
python3 -c '
import socket, time
for _ in range(100):
    try:
        print("own listener:", socket.create_connection(("127.0.0.1", PORT), 1).recv(64).decode())
        break
    except OSError:
        time.sleep(0.05)
'
"""
# What one step sees: its namespaces, its uid map, what listens on the port, nesting.
PROBE = """
ns=/proc/self/ns
echo "NAME net $(readlink $ns/net) user $(readlink $ns/user) map $(cat /proc/self/uid_map)"
python3 -c '
import socket
try:
    print("NAME reached:", socket.create_connection(("127.0.0.1", PORT), 1).recv(64).decode())
except OSError as exc:
    print("NAME nothing listens:", type(exc).__name__)
'
unshare -U true 2>/dev/null && echo "NAME nested" || echo "NAME no-nested"
"""


def test_untrusted_steps_share_the_build_namespaces_a_trusted_step_has_its_own(
    repo: Repo, options: RunnerOptions
) -> None:
    """The untrusted steps of a build share one user and network namespace (made once); nothing
    an earlier step left listens on its loopback, and a trusted step has a loopback of its own."""
    port = str(20000 + os.getpid() % 20000)
    repo.script("agent.sh", FAKE_AGENT.replace("PORT", port))
    for name in ("first", "later", "trusted"):
        repo.script(f"{name}.sh", PROBE.replace("NAME", name).replace("PORT", port))
    run = ("first.sh", "agent.sh", "later.sh")
    spec = make_spec(repo, repo.commit(), run=run, post_run=(playbook("trusted.sh", trusted=True),))
    result = run_build(spec, BaseControl(), replace(options, sandbox="bwrap"))
    text = Path(result.log_path).read_text()
    assert result.result is Result.SUCCESS, text
    assert "own listener: FAKE AGENT" in text  # its loopback works while it runs
    found = re.findall(r"\| (\w+) net (net:\[\d+\]) user (user:\[\d+\]) map (.*)", text)
    seen = {name: (net, user) for name, net, user, _ in found}
    assert set(seen) == {"first", "later", "trusted"}, text
    assert seen["first"] == seen["later"]
    assert seen["first"][0] != seen["trusted"][0] and seen["first"][1] != seen["trusted"][1]
    assert [line[3].split() for line in found] == [
        ["1000", str(host_uid(spec.context.build_uuid)), "1"]
    ] * 3
    for step in ("first", "later", "trusted"):
        assert f"{step} nothing listens" in text and f"{step} no-nested" in text, text


def _shared_etc_in_child(state_dir: Path) -> str:
    """``shared_etc`` as another worker process of the host would call it: its path."""
    code = "import sys; from pathlib import Path; from workers.executor.sandbox import shared_etc; "
    code += "print(shared_etc(Path(sys.argv[1])))"
    argv = [sys.executable, "-c", code, str(state_dir)]
    return subprocess.run(argv, capture_output=True, text=True, check=True).stdout.strip()


def test_one_etc_copy_serves_every_process_of_the_host(tmp_path: Path) -> None:
    first, second = _shared_etc_in_child(tmp_path), _shared_etc_in_child(tmp_path)
    assert first == second
    copies = [p.name for p in (tmp_path / "sandbox").iterdir() if p.is_dir() and "." not in p.name]
    assert copies == [Path(first).name]
    etc = Path(first)
    assert "sluice" in (etc / "passwd").read_text()
    assert stat.S_IMODE(etc.stat().st_mode) & 0o005 == 0o005  # any job user reaches it
    # each process records itself; the second forgot the first, which was gone
    users = etc.with_name(etc.name + ".users")
    assert len(list(users.iterdir())) == 1
    sandbox.shared_etc.cache_clear()
    try:
        assert sandbox.shared_etc(tmp_path) == etc
    finally:
        sandbox.shared_etc.cache_clear()
    assert [p.name for p in users.iterdir()] == [str(os.getpid())]


def test_copies_no_live_process_uses_are_removed(tmp_path: Path) -> None:
    folder = tmp_path / "sandbox"
    folder.mkdir()
    prefix = f"etc-{os.uname().nodename}-"
    dead = _a_dead_pid()

    def copy(name: str, *users: int) -> Path:
        path = folder / f"{prefix}{name}"
        (path / "ssl").mkdir(parents=True)
        if users:
            (folder / f"{prefix}{name}.users").mkdir()
            for pid in users:
                (folder / f"{prefix}{name}.users" / str(pid)).touch()
        return path

    unused = copy("dold", dead)
    used = copy("dother", dead, os.getpid())
    legacy_dead, legacy_live = copy(str(dead)), copy(str(os.getpid()))
    draft = copy("dold.draft-12345")
    sandbox.shared_etc.cache_clear()
    try:
        mine = sandbox.shared_etc(tmp_path)
    finally:
        sandbox.shared_etc.cache_clear()
    assert mine.is_dir()
    assert not unused.exists() and not unused.with_name(unused.name + ".users").exists()
    assert not legacy_dead.exists() and not draft.exists()
    assert used.is_dir() and legacy_live.is_dir()
    assert [p.name for p in (folder / f"{used.name}.users").iterdir()] == [str(os.getpid())]


def _a_dead_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid
