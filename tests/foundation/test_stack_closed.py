"""The local stack closed by default, against the real thing.

``sluice stack up`` makes a ZooKeeper no client without Sluice's password
can list, read or write (digest ACLs on every node, ``/`` and
``/zookeeper`` included), closes the tree of an older, open run, refuses
what would run open before it starts anything (a ZooKeeper outside
loopback without ``zookeeper.auth``, a Redis that asks for no password, a
reused ZooKeeper anyone may write), keeps its state dir 0700 with its
files 0600 and its services at umask 077; ``sluice stack down`` signals
only the processes it can prove it started.
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from kazoo.security import OPEN_ACL_UNSAFE, make_digest_acl, make_digest_acl_credential

from cli.stack import closed, process
from cli.stack.local import LocalStack, StackEntry
from cli.stack.redis import RedisServer
from cli.stack.zookeeper import ZooKeeperServer
from scheduler.errors import SettingsError
from scheduler.settings import exposure
from scheduler.settings.load import load_settings
from scheduler.zk import paths
from scheduler.zk.client import connect
from tests.e2e.system import Repos
from tests.fixtures.cli import SLUICE, run_sluice
from tests.fixtures.waiting import wait_until


def _config(tmp_path: Path, text: str) -> Path:
    config = tmp_path / "sluice.yaml"
    config.write_text(f"state_dir: state\ntenant_config: main.yaml\n{text}")
    return config


def _ports_config(tmp_path: Path) -> tuple[Path, int, int]:
    zk_port, redis_port, web_port = (process.free_port() for _ in range(3))
    config = _config(
        tmp_path,
        f"zookeeper:\n  hosts: 127.0.0.1:{zk_port}\n  root: /sluice\n"
        f"broker_url: redis://127.0.0.1:{redis_port}/0\n"
        f"web:\n  listen: 127.0.0.1:{web_port}\n"
        "connections:\n  local:\n    driver: git\n    baseurl: repos\n",
    )
    return config, zk_port, web_port


@pytest.fixture
def client() -> Iterator[Callable[..., KazooClient]]:
    """Started kazoo clients, closed after the test: ``client(hosts, auth=None)``."""
    made: list[KazooClient] = []

    def make(hosts: str, auth: str | None = None) -> KazooClient:
        kazoo = KazooClient(hosts=hosts, auth_data=[("digest", auth)] if auth else None)
        kazoo.start(timeout=10)
        made.append(kazoo)
        return kazoo

    yield make
    for kazoo in made:
        kazoo.stop()
        kazoo.close()


def _refused(call: Callable[[], Any]) -> bool:
    try:
        call()
    except NoAuthError:
        return True
    return False


def _mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


def _umask(pid: int) -> str:
    line = next(x for x in Path(f"/proc/{pid}/status").read_text().splitlines() if "Umask" in x)
    return line.split()[1]


def test_stack_up_closes_zookeeper_and_its_state_dir(
    tmp_path: Path, client: Callable[..., KazooClient]
) -> None:
    config, zk_port, web_port = _ports_config(tmp_path)
    (tmp_path / "main.yaml").write_text(
        "- tenant:\n    name: demo\n    source:\n      local:\n        config-projects: [config]\n"
    )
    Repos(tmp_path / "repos").commit(
        "config", "main", {"zuul.yaml": "- job:\n    name: base\n    parent: null\n"}
    )
    up = run_sluice("--config", str(config), "stack", "up", cwd=tmp_path, timeout=240)
    state = tmp_path / "state"
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        assert "tenant demo: loaded" in up.stdout, up.stdout + up.stderr
        # the stack works: a round trip through Redis to a worker that writes ZooKeeper
        trip = run_sluice("--config", str(config), "roundtrip", cwd=tmp_path, timeout=120)
        assert trip.returncode == 0 and "round trip OK" in trip.stdout, trip.stdout + trip.stderr

        # the project's key pair, made on first use (the private key encrypted, in ZooKeeper)
        key_url = f"http://127.0.0.1:{web_port}/api/tenant/demo/key/config.pub"
        with urllib.request.urlopen(key_url, timeout=60) as response:
            assert b"PUBLIC KEY" in response.read()
        hosts = f"127.0.0.1:{zk_port}"
        password = (state / "zookeeper.password").read_text().strip()
        assert len(password) >= 32
        sluice = client(hosts, f"sluice:{password}")
        secrets = "/sluice" + paths.keystorage("local", "config")
        assert sluice.exists(secrets), sluice.get_children("/sluice")
        assert "components" in sluice.get_children("/sluice")
        ours = [make_digest_acl("sluice", password, all=True)]
        for path in ("/", "/zookeeper", "/zookeeper/quota", "/sluice", secrets):
            assert sluice.get_acls(path)[0] == ours, path

        stranger = client(hosts)  # no auth: what a job on this host has
        attempts = {
            "list /": lambda: stranger.get_children("/"),
            "create at /": lambda: stranger.create("/intruder"),
            "list the chroot": lambda: stranger.get_children("/sluice"),
            "read the chroot": lambda: stranger.get("/sluice"),
            "create in the chroot": lambda: stranger.create("/sluice/intruder"),
            "read the secrets": lambda: stranger.get(secrets),
            "list the components": lambda: stranger.get_children("/sluice/components"),
            "set a quota": lambda: stranger.create("/zookeeper/quota/sluice"),
            "open the chroot's ACL": lambda: stranger.set_acls("/sluice", OPEN_ACL_UNSAFE),
        }
        assert [what for what, call in attempts.items() if not _refused(call)] == []
        wrong = client(hosts, "sluice:guessed")
        assert _refused(lambda: wrong.get_children("/sluice"))
        # the superuser of the stack's ZooKeeper is the operator's way in
        superuser = (state / "zookeeper" / "super.password").read_text().strip()
        operator = client(hosts, f"super:{superuser}")
        assert operator.get(secrets)[0]
        # what a client without auth still sees: exists (a node's stat) asks for no permission
        assert stranger.exists("/sluice") is not None

        # the state dir and what is in it: the stack's alone
        assert _mode(state) == 0o700
        for folder in ("zookeeper", "zookeeper/data", "redis", "logs", "run"):
            assert _mode(state / folder) == 0o700, folder
        files = [p for p in state.rglob("*") if p.is_file()]
        secrets_and_logs = [
            "broker.password",
            "keystore.password",
            "zookeeper.password",
            "zookeeper/super.password",
            "zookeeper/zoo.cfg",
            "redis/redis.conf",
            "zookeeper/zookeeper.log",
            "logs/worker-executor.log",
            "run/stack.json",
        ]
        assert {str(p.relative_to(state)) for p in files} >= set(secrets_and_logs)
        for name in secrets_and_logs:
            assert _mode(state / name) == 0o600, name
        # nothing below it is open to others but what sandboxed jobs (each a user
        # of its own) must read or write: the merger's repositories, workspaces and
        # build log folders, the copy of /etc they see; the state dir's own 0700
        # keeps every other user out
        for_jobs = ("git", "builds", "logs", "sandbox")
        shared = [
            p
            for p in state.rglob("*")
            if _mode(p) & 0o077 and p.relative_to(state).parts[0] not in for_jobs
        ]
        assert shared == []
        assert _mode(state) == 0o700
        stack = json.loads((state / "run" / "stack.json").read_text())["components"]
        pids = {entry["name"]: entry["pid"] for entry in stack}
        for name in ("zookeeper", "redis", "worker-executor", "web", "supervisor"):
            assert _umask(pids[name]) == "0077", name
        # the superuser's password is never on a command line nor in a log
        cmdline = Path(f"/proc/{pids['zookeeper']}/cmdline").read_text()
        assert superuser not in cmdline and password not in cmdline
        logs = "".join(p.read_text(errors="replace") for p in state.rglob("*.log"))
        assert password not in logs + up.stdout + up.stderr
    finally:
        down = run_sluice("--config", str(config), "stack", "down", cwd=tmp_path, timeout=120)
    assert down.returncode == 0, down.stderr
    assert "left alone" not in down.stderr


def test_stack_up_closes_the_open_tree_of_an_older_run(
    tmp_path: Path, client: Callable[..., KazooClient]
) -> None:
    """An older, unauthenticated run left an open chroot (and a squatter's node) in the data dir."""
    config, zk_port, _ = _ports_config(tmp_path)
    hosts = f"127.0.0.1:{zk_port}"
    old = ZooKeeperServer(data_dir=tmp_path / "state" / "zookeeper", port=zk_port)
    old.start()
    try:
        old.wait_ready(timeout=60)
        before = client(hosts)
        secrets = "/sluice" + paths.keystorage("local", "app")
        before.create(secrets, b"private key", makepath=True)
        squatter = [make_digest_acl("intruder", "theirs", all=True)]
        before.create("/sluice/squatted", b"", acl=squatter)
        before.create("/elsewhere", b"")
        before.stop()
    finally:
        old.stop()
    stack = LocalStack(load_settings(config, {}))
    closed.private_state_dir(stack.settings)
    stack._zookeeper_identity()
    entry = stack._start_zookeeper("127.0.0.1", zk_port)
    assert entry.pid is not None
    try:
        stack._close_zookeeper(entry)
        assert stack.notes == [
            f"ZooKeeper at {hosts}: 7 nodes given Sluice's ACL (a tree made without it)"
        ]
        stranger = client(hosts)
        for path in ("/sluice", "/sluice/keystorage", secrets, "/sluice/squatted", "/elsewhere"):
            assert _refused(lambda path=path: stranger.get(path)), path
        assert _refused(lambda: stranger.create("/again"))
        auth = stack.settings.zookeeper.auth
        assert auth is not None
        sluice = client(hosts, f"sluice:{auth.password}")
        assert sluice.get(secrets)[0] == b"private key"
        sluice.delete("/sluice/squatted")  # Sluice's own again (the superuser set its ACL)
        # closed once: a second look changes nothing
        stack.notes = []
        stack._close_zookeeper(entry)
        assert stack.notes == []
    finally:
        process.stop_group(entry.pid)


def test_stack_up_refuses_to_reuse_an_open_zookeeper(
    zookeeper_server: ZooKeeperServer, tmp_path: Path
) -> None:
    """The tests' ZooKeeper lets anyone create at /: not the stack's to reuse."""
    broker = f"broker_url: redis://127.0.0.1:{process.free_port()}/0\n"
    config = _config(tmp_path, f"zookeeper:\n  hosts: {zookeeper_server.hosts}\n{broker}")
    done = run_sluice("--config", str(config), "stack", "up", cwd=tmp_path)
    assert done.returncode == 1
    assert done.stderr.strip() == (
        f"Error: refusing to reuse the ZooKeeper at {zookeeper_server.hosts} (zookeeper.hosts), "
        "not started by the stack: anyone may create nodes at /; close it (ACL of / and of "
        "/sluice), or point zookeeper.hosts at a free port so the stack starts its own"
    ), done.stderr
    recorded = json.loads((tmp_path / "state" / "run" / "stack.json").read_text())
    assert recorded == {"components": []}  # nothing started, the ZooKeeper not recorded


@pytest.mark.parametrize(
    ("section", "message"),
    [
        (
            "zookeeper:\n  hosts: 127.0.0.1:2181,zk2.example.com:2181\n",
            "refusing to use ZooKeeper at 127.0.0.1:2181,zk2.example.com:2181 without "
            "authentication: zookeeper.hosts names zk2.example.com, outside loopback, and "
            "zookeeper.auth is not set; set zookeeper.auth (username and password_file), or "
            "use a loopback ZooKeeper",
        ),
        (
            "broker_url: {open_redis}\n",
            "refusing to reuse the Redis at {open_redis} (broker_url): it answers without a "
            "password, so any local process could read and write the broker; give it a "
            "password (requirepass, and broker.password_file), or point broker_url at a free "
            "port so the stack starts its own",
        ),
    ],
    ids=["zookeeper-outside-loopback", "open-redis"],
)
def test_stack_up_refuses_what_would_run_open_before_anything_starts(
    redis_server: RedisServer, tmp_path: Path, section: str, message: str
) -> None:
    zk_port = process.free_port()
    fill = {"open_redis": redis_server.url}
    config = _config(
        tmp_path, f"zookeeper:\n  hosts: 127.0.0.1:{zk_port}\n" + section.format(**fill)
    )
    if section.startswith("zookeeper"):
        config = _config(tmp_path, section)
    started = time.monotonic()
    done = run_sluice("--config", str(config), "stack", "up", cwd=tmp_path)
    print(f"refused in {time.monotonic() - started:.2f}s")
    assert done.returncode == 1
    assert done.stderr.strip() == f"Error: {message.format(**fill)}", done.stderr
    assert not (tmp_path / "state").exists()  # nothing started, nothing made
    assert not process.port_open("127.0.0.1", zk_port)


def test_zookeeper_auth_settings(tmp_path: Path) -> None:
    """``zookeeper.auth.password_file``, ``SLUICE_ZK_PASSWORD_FILE``, the stack's file."""
    secret = tmp_path / "zk.password"
    secret.write_text("from-a-file\n")
    config = _config(
        tmp_path,
        "zookeeper:\n  hosts: zk1:2181\n  auth:\n    username: ci\n"
        "    password_file: zk.password\n",
    )
    auth = load_settings(config, {}).zookeeper.auth
    assert auth is not None and (auth.username, auth.password) == ("ci", "from-a-file")
    assert auth.password_file == secret
    exposure.refuse_open_zookeeper(load_settings(config, {}).zookeeper)  # auth: accepted
    both = _config(
        tmp_path, "zookeeper:\n  auth:\n    username: ci\n    password: x\n    password_file: y\n"
    )
    with pytest.raises(SettingsError, match="give password or password_file, not both"):
        load_settings(both, {})
    # a loopback ZooKeeper without zookeeper.auth: the stack's identity once its file exists
    plain = _config(tmp_path, "zookeeper:\n  hosts: 127.0.0.1:2181\n")
    assert load_settings(plain, {}).zookeeper.auth is None
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "zookeeper.password").write_text("made-by-the-stack\n")
    auth = load_settings(plain, {}).zookeeper.auth
    assert auth is not None and (auth.username, auth.password) == ("sluice", "made-by-the-stack")
    # ... never for one outside loopback, which needs zookeeper.auth
    remote = _config(tmp_path, "zookeeper:\n  hosts: zk1:2181\n")
    assert load_settings(remote, {}).zookeeper.auth is None
    with pytest.raises(SettingsError, match="refusing to use ZooKeeper at zk1:2181"):
        exposure.refuse_open_zookeeper(load_settings(remote, {}).zookeeper)
    env = {"SLUICE_ZK_PASSWORD_FILE": str(secret)}
    auth = load_settings(remote, env).zookeeper.auth
    assert auth is not None and (auth.username, auth.password) == ("sluice", "from-a-file")
    # digest auth across a network without TLS: stack up notes the password goes in the clear
    assert exposure.zookeeper_cleartext(load_settings(remote, env).zookeeper) == (
        "ZooKeeper at zk1:2181: digest authentication without zookeeper.tls sends the "
        "password over the network in the clear"
    )
    assert exposure.zookeeper_cleartext(load_settings(plain, {}).zookeeper) is None
    # a password file that is missing or empty is refused before connecting
    (tmp_path / "state" / "zookeeper.password").write_text("")
    configured = _config(
        tmp_path,
        "zookeeper:\n  hosts: 127.0.0.1:1\n  auth:\n    username: ci\n"
        "    password_file: state/zookeeper.password\n",
    )
    with pytest.raises(SettingsError, match=r"zookeeper.auth: no password \(.* is missing"):
        connect(load_settings(configured, {}).zookeeper)


def test_a_looser_state_dir_is_tightened_and_a_shared_one_refused(tmp_path: Path) -> None:
    config = _config(tmp_path, "")
    state = tmp_path / "state"
    (state / "logs" / "build-1").mkdir(parents=True)
    (state / "zookeeper" / "data").mkdir(parents=True)
    loose = {
        state: 0o755,
        state / "logs": 0o755,
        state / "logs" / "build-1": 0o775,
        state / "logs" / "build-1" / "job-output.txt": 0o644,
        state / "logs" / "web.log": 0o644,
        state / "broker.password": 0o644,
        state / "sluice.db": 0o664,
        state / "zookeeper" / "data": 0o755,
        state / "zookeeper" / "zoo.cfg": 0o644,
    }
    for path, mode in loose.items():
        if not path.exists():
            path.write_text("x\n")
        path.chmod(mode)
    closed.private_state_dir(load_settings(config, {}))
    assert {str(p.relative_to(tmp_path)): oct(_mode(p)) for p in loose} == {
        str(p.relative_to(tmp_path)): oct(0o700 if p.is_dir() else 0o600) for p in loose
    }
    shared = _config(tmp_path, "")
    shared.write_text(f"state_dir: {tmp_path / 'shared'}\n")
    (tmp_path / "shared").mkdir(mode=0o777)
    (tmp_path / "shared").chmod(0o1777)
    with pytest.raises(SettingsError, match="is a shared folder"):
        closed.private_state_dir(load_settings(shared, {}))


def _sleeper() -> subprocess.Popen[bytes]:
    return subprocess.Popen(["sleep", "300"], start_new_session=True)


def test_stack_down_signals_only_the_processes_it_can_prove_it_started(tmp_path: Path) -> None:
    config = _config(tmp_path, "")
    stack = LocalStack(load_settings(config, {}))
    ours = process.spawn(["sleep", "300"], tmp_path / "ours.log")
    unrelated = _sleeper()  # a stack file edited, or a pid reused: not what the stack ran
    legacy = _sleeper()  # an entry written before identities were recorded
    impostor = _sleeper()  # right start time, wrong executable: not what the stack ran
    try:
        entries = {
            "ours": StackEntry.started("ours", "worker", ours.pid, "-", "ours.log"),
            "web": StackEntry.started("web", "web", ours.pid, "-", "web.log"),
            "legacy": StackEntry("legacy", "worker", legacy.pid, "-"),
        }
        real = entries["web"]
        entries["web"] = StackEntry(
            "web", "web", unrelated.pid, "-", start_time=real.start_time - 500,
            boot_id=real.boot_id, exe=real.exe,
        )  # fmt: skip
        found = process.identity(impostor.pid)
        assert found is not None
        entries["impostor"] = StackEntry(
            "impostor", "worker", impostor.pid, "-", start_time=found.start_time,
            boot_id=found.boot_id, exe="/usr/bin/java",
        )  # fmt: skip
        stack.save(entries)
        stopped = stack.down()
        assert [entry.name for entry in stopped] == ["ours"]
        wait_until(lambda: ours.poll() is not None, 10, "our own process to stop")
        assert sorted(stack.left_alone) == [
            f"impostor (pid {impostor.pid}): it runs /usr/bin/sleep, not /usr/bin/java",
            f"legacy (pid {legacy.pid}): no start time is recorded for it",
            f"web (pid {unrelated.pid}): it started at another time (pid reused)",
        ]
        for survivor in (unrelated, legacy, impostor):
            assert survivor.poll() is None and process.is_alive(survivor.pid)
        assert not stack.stack_file.exists()
    finally:
        for child in (ours, unrelated, legacy, impostor):
            child.kill()
            child.wait()


def test_stack_down_through_the_command_line_names_what_it_left_alone(tmp_path: Path) -> None:
    config = _config(tmp_path, "")
    stranger = _sleeper()
    try:
        run = tmp_path / "state" / "run"
        run.mkdir(parents=True)
        entry = {"name": "web", "kind": "web", "pid": stranger.pid, "address": "-"}
        entry |= {"start_time": 1, "boot_id": "another", "exe": "/usr/bin/python3"}
        (run / "stack.json").write_text(json.dumps({"components": [entry]}))
        done = run_sluice("--config", str(config), "stack", "down", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "nothing to stop"
        assert done.stderr.strip() == (
            f"left alone web (pid {stranger.pid}): it was recorded before the last boot"
        )
        assert stranger.poll() is None
    finally:
        stranger.kill()
        stranger.wait()


def test_sluice_zookeeper_secure_closes_a_deployments_server(
    tmp_path: Path, client: Callable[..., KazooClient]
) -> None:
    """What docker/compose.yaml's zk-init runs, against a server of its own."""
    superuser = tmp_path / "super.password"
    superuser.write_text("the operator's\n")
    printed = subprocess.run(
        [SLUICE, "zookeeper", "digest", "super"],
        input="the operator's\n", capture_output=True, text=True, check=True, timeout=60,
    ).stdout.strip()  # fmt: skip
    assert printed == make_digest_acl_credential("super", "the operator's")
    port = process.free_port()
    server = ZooKeeperServer(
        data_dir=tmp_path / "zk", port=port, four_letter_words="ruok,srvr", super_digest=printed
    )
    server.start()
    try:
        server.wait_ready(timeout=60)
        hosts = server.hosts
        before = client(hosts)
        before.create("/sluice/tenant/t", b"open", makepath=True)
        before.create("/sluice/theirs", b"", acl=[make_digest_acl("other", "x", all=True)])
        (tmp_path / "zk.password").write_text("deployment's\n")
        config = _config(
            tmp_path,
            f"zookeeper:\n  hosts: {hosts}\n  auth:\n    username: sluice\n"
            "    password_file: zk.password\n",
        )
        secure = ("--config", str(config), "zookeeper", "secure")
        refused = run_sluice(*secure, cwd=tmp_path)
        assert refused.returncode == 1
        assert "could not give sluice's ACL to /sluice/theirs" in refused.stderr
        done = run_sluice(*secure, "--super-password-file", str(superuser), cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        assert f"ZooKeeper at {hosts}: closed to all but sluice" in done.stdout
        stranger = client(hosts)
        for path in ("/", "/sluice", "/sluice/tenant/t", "/sluice/theirs"):
            assert _refused(lambda path=path: stranger.get_children(path)), path
        sluice = client(hosts, "sluice:deployment's")
        assert sluice.get("/sluice/tenant/t")[0] == b"open"
        again = run_sluice(*secure, cwd=tmp_path)
        assert again.returncode == 0 and "ACL set" not in again.stdout  # closed already
    finally:
        server.stop()
