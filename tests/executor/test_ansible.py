"""Playbook steps: real ansible-playbook runs, on the executor and on a real sshd node.

Every test runs without a sandbox and in bubblewrap (``executor.sandbox``);
nothing is mocked: the node is ``tests/fixtures/sshd.py``'s sshd on
127.0.0.1, reached through the build's own ssh-agent.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import replace
from pathlib import Path

import pytest

from cli.stack.process import free_port
from scheduler.crypto import ENCRYPTED
from tests.executor.helpers import (
    BuildThread,
    Repo,
    exit_codes,
    make_spec,
    playbook,
    processes_of_build,
)
from tests.fixtures.sshd import SshHost
from tests.fixtures.waiting import wait_until
from workers.executor import (
    BaseControl,
    LocalControl,
    Phase,
    Result,
    RunnerOptions,
    StepOutcome,
    run_build,
)
from workers.executor.playbooks import inventory, zuul_vars
from workers.executor.secrets import MASK
from workers.executor.workspace import BuildLayout
from workers.nodekey import ensure_node_key

ROOT = Path(__file__).resolve().parents[2]

SECRET_KEY = "org/project@main:creds"
PASSWORD = "correct horse battery staple"

PASSING = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: say hello
      command: echo hello from {{ zuul.job }}
"""

FAILING = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: fail here
      shell: echo about to fail; exit 3
    - name: never reached
      command: echo never
"""


@pytest.fixture(params=["none", "bwrap"])
def sandboxed(request: pytest.FixtureRequest, options: RunnerOptions) -> RunnerOptions:
    return replace(options, sandbox=request.param)


def log_of(result_log: str) -> str:
    return Path(result_log).read_text()


def test_a_localhost_playbook_passes(repo: Repo, sandboxed: RunnerOptions) -> None:
    repo.write("playbooks/run.yaml", PASSING)
    repo.script("pre.sh", "echo an executable still runs")
    spec = make_spec(repo, repo.commit(), pre_run=("pre.sh",), run=("playbooks/run.yaml",))

    result = run_build(spec, BaseControl(), sandboxed)

    assert result.result is Result.SUCCESS, (result.message, log_of(result.log_path))
    assert exit_codes(result, Phase.RUN) == [0]
    text = log_of(result.log_path)
    assert "| pre-run | an executable still runs" in text
    assert "| run | TASK [say hello]" in text
    assert "| run | localhost | hello from unit-tests" in text
    assert "| run | localhost | changed (rc=0)" in text
    assert "| run | PLAY RECAP" in text
    assert "| run | localhost | ok=1 changed=1 unreachable=0 failed=0" in text


def test_a_failing_run_playbook_is_failure(repo: Repo, sandboxed: RunnerOptions) -> None:
    repo.write("playbooks/run.yml", FAILING)
    spec = make_spec(repo, repo.commit(), run=("playbooks/run.yml",))

    result = run_build(spec, BaseControl(), sandboxed)

    assert result.result is Result.FAILURE
    assert result.message == "run playbooks/run.yml failed with exit code 2"
    text = log_of(result.log_path)
    assert "localhost | about to fail" in text
    assert "localhost | FAILED (rc=3): non-zero return code" in text
    assert "TASK [never reached]" not in text


def test_a_playbook_that_does_not_parse_is_failure_not_retry(
    repo: Repo, options: RunnerOptions
) -> None:
    """ansible-playbook exits 4 for a parse error too: only an unreachable host retries."""
    repo.write("playbooks/run.yaml", "- hosts: localhost\n  tasks:\n    - no_such_module: x\n")
    spec = make_spec(repo, repo.commit(), run=("playbooks/run.yaml",))

    result = run_build(spec, BaseControl(), options)

    assert result.result is Result.FAILURE
    assert result.message == "run playbooks/run.yaml failed with exit code 4"


def test_a_failing_pre_run_playbook_is_retry(repo: Repo, options: RunnerOptions) -> None:
    repo.write("playbooks/pre.yaml", FAILING)
    repo.write("playbooks/run.yaml", PASSING)
    spec = make_spec(
        repo, repo.commit(), pre_run=("playbooks/pre.yaml",), run=("playbooks/run.yaml",)
    )

    result = run_build(spec, BaseControl(), options)

    assert result.result is Result.RETRY
    assert result.message == "pre-run playbooks/pre.yaml failed with exit code 2"
    assert [s.phase for s in result.steps] == [Phase.PRE_RUN]


VARIABLES = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: write what the playbook sees
      copy:
        dest: "{{ zuul.executor.log_root }}/seen.json"
        content: "{{ {'job': zuul.job, 'project': zuul.project, 'change': zuul.change,
                      'patchset': zuul.patchset, 'colour': colour, 'user': site.user,
                      'success': zuul_success | default('unset')} | to_json }}"
    - name: show the secret
      debug:
        msg: "password is {{ site.password }}"
"""


def test_a_playbook_sees_zuul_job_vars_and_its_secrets_masked(
    repo: Repo, sandboxed: RunnerOptions
) -> None:
    repo.write("playbooks/run.yaml", VARIABLES)
    secret = {
        "connection": "git",
        "project": "org/project",
        "name": "creds",
        "data": {"user": "deployer", "password": {ENCRYPTED: ["(already decrypted below)"]}},
    }
    spec = make_spec(
        repo,
        repo.commit(),
        run=(playbook("playbooks/run.yaml", secrets=(("site", SECRET_KEY),)),),
        vars={"colour": "blue"},
        secrets={SECRET_KEY: secret},
    )
    plain = {SECRET_KEY: {"user": "deployer", "password": PASSWORD}}

    result = run_build(spec, BaseControl(), sandboxed, plain)

    assert result.result is Result.SUCCESS, (result.message, log_of(result.log_path))
    seen = json.loads((Path(result.log_path).parent / "seen.json").read_text())
    assert seen == {
        "job": "unit-tests",
        "project": {
            "name": "org/project",
            "short_name": "project",
            "canonical_name": "org/project",
            "src_dir": "src/org/project",
        },
        "change": "1",
        "patchset": "1",
        "colour": "blue",
        "user": "deployer",
        "success": "unset",
    }
    text = log_of(result.log_path)
    assert f"localhost | ok: password is {MASK}" in text
    assert PASSWORD not in text


STREAMING = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: first
      command: echo first task done
    - name: wait for the test
      wait_for:
        path: "{{ zuul.executor.log_root }}/go"
        timeout: 60
    - name: last
      command: echo last task done
"""


def test_the_log_shows_a_task_before_the_playbook_ends(repo: Repo, options: RunnerOptions) -> None:
    repo.write("playbooks/run.yaml", STREAMING)
    spec = make_spec(repo, repo.commit(), run=("playbooks/run.yaml",))
    log_file = options.state_dir / "logs" / spec.context.build_uuid / "job-output.txt"

    build = BuildThread(spec, BaseControl(), options)
    wait_until(
        lambda: log_file.exists() and "localhost | first task done" in log_file.read_text(),
        timeout=60,
    )
    assert "last task done" not in log_file.read_text()
    (log_file.parent / "go").touch()
    result = build.join(timeout=60)

    assert result.result is Result.SUCCESS, result.message
    assert "localhost | last task done" in log_of(result.log_path)


# The test node is this machine, where root's login PATH may hold a broken
# pyenv shim that interpreter discovery would pick: name the system python.
ON_NODES = """
- hosts: all
  gather_facts: false
  vars:
    ansible_python_interpreter: /usr/bin/python3
  tasks:
    - name: who is there
      command: hostname
    - name: leave a mark
      copy:
        dest: "{{ mark }}"
        content: "{{ inventory_hostname }} {{ nodepool.host_id }} {{ nodepool.label }}\\n"
- hosts: localhost
  gather_facts: false
  tasks:
    - name: where is the agent
      copy:
        dest: "{{ zuul.executor.log_root }}/agent"
        content: "{{ lookup('env', 'SSH_AUTH_SOCK') }}"
    - name: read the node key
      command: cat {{ node_key }}
      register: key_read
      failed_when: false
      no_log: true
    - name: how much of the key it read
      copy:
        dest: "{{ zuul.executor.log_root }}/key-read"
        content: "{{ key_read.stdout | length }}"
"""


def node(host: str, port: int, username: str = "root") -> dict[str, object]:
    connection = {"host": host, "port": port, "username": username}
    return {
        "name": "node1",
        "id": "0000000042",
        "label": "debian",
        "host": "h1",
        "connection": connection,
    }


def test_a_playbook_runs_on_a_node_over_ssh(
    repo: Repo, sandboxed: RunnerOptions, ssh_host: SshHost, tmp_path: Path
) -> None:
    mark = tmp_path / f"mark-{uuid.uuid4().hex}"
    repo.write("playbooks/run.yaml", ON_NODES)
    spec = make_spec(
        repo,
        repo.commit(),
        pre_run=("playbooks/run.yaml",),  # a second playbook reuses the SSH set-up
        run=("playbooks/run.yaml",),
        vars={"mark": str(mark), "node_key": str(ssh_host.key)},
        nodes=(node(ssh_host.host, ssh_host.port),),
    )
    # the node listens on the host's loopback: playbooks of a build with nodes share its network
    options = replace(
        sandboxed, node_key=ssh_host.key, hidden=(ssh_host.key,), sandbox_network="nodes"
    )

    result = run_build(spec, BaseControl(), options)

    assert result.result is Result.SUCCESS, (result.message, log_of(result.log_path))
    assert ssh_host.ssh(f"cat {mark}").stdout == "node1 0000000042 debian\n"
    text = log_of(result.log_path)
    assert f"node1 | {os.uname().nodename}" in text
    assert "node1 | ok=2 changed=2 unreachable=0 failed=0" in text
    # no_log hides a task's output; in the sandbox the key (hidden) reads empty
    assert "PRIVATE KEY" not in text
    key_read = int((Path(result.log_path).parent / "key-read").read_text())
    assert (key_read == 0) is (sandboxed.sandbox == "bwrap")
    # the agent of the build is gone with its folder
    agent = Path((Path(result.log_path).parent / "agent").read_text())
    assert agent.name == "agent.sock"
    assert not agent.parent.exists()
    assert not [pid for pid in _pids() if str(agent).encode() in _cmdline(pid)]


def test_an_unreachable_node_is_retry(
    repo: Repo, sandboxed: RunnerOptions, ssh_host: SshHost
) -> None:
    repo.write("playbooks/run.yaml", ON_NODES)
    repo.script("post.sh", 'echo post ran > "$SLUICE_LOG_DIR/post"')
    spec = make_spec(
        repo,
        repo.commit(),
        run=("playbooks/run.yaml",),
        post_run=("post.sh",),
        vars={"mark": "/nonexistent"},
        nodes=(node("127.0.0.1", free_port()),),  # nothing listens there
    )
    options = replace(sandboxed, node_key=ssh_host.key)

    result = run_build(spec, BaseControl(), options)

    assert result.result is Result.RETRY
    assert result.message == (
        "run playbooks/run.yaml failed with exit code 4: a host was unreachable"
    )
    assert (Path(result.log_path).parent / "post").read_text() == "post ran\n"
    assert "node1 | UNREACHABLE" in log_of(result.log_path)


SLEEPING = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: sleep a long time
      command: sleep 60
"""


def test_a_playbook_that_times_out_is_timed_out_and_leaves_nothing(
    repo: Repo, sandboxed: RunnerOptions
) -> None:
    repo.write("playbooks/run.yaml", SLEEPING)
    spec = make_spec(repo, repo.commit(), run=("playbooks/run.yaml",), timeout=4.0)

    result = run_build(spec, BaseControl(), sandboxed)

    assert result.result is Result.TIMED_OUT, result.message
    assert [s.outcome for s in result.steps] == [StepOutcome.TIMED_OUT]
    assert "TASK [sleep a long time]" in log_of(result.log_path)
    assert processes_of_build(spec.context.build_uuid) == []


def test_a_cancelled_playbook_stops_within_two_seconds(repo: Repo, options: RunnerOptions) -> None:
    repo.write("playbooks/run.yaml", SLEEPING)
    spec = make_spec(repo, repo.commit(), run=("playbooks/run.yaml",))
    control = LocalControl()
    build = BuildThread(spec, control, options)
    log_file = options.state_dir / "logs" / spec.context.build_uuid / "job-output.txt"
    wait_until(
        lambda: log_file.exists() and "TASK [sleep a long time]" in log_file.read_text(),
        timeout=60,
    )
    wait_until(lambda: _sleeping(spec.context.build_uuid), timeout=30, what="the task's sleep")

    cancelled_at = time.monotonic()
    control.cancel()
    result = build.join()

    assert time.monotonic() - cancelled_at < 2.0
    assert result.result is Result.ABORTED
    assert processes_of_build(spec.context.build_uuid) == []


# A worker in miniature: it starts a build's agent the way the runner does,
# says where it is, and waits to be killed.
START_AN_AGENT = """
import sys, time
from pathlib import Path
from workers.executor.sshagent import SshAgent, make_socket_folder
agent = SshAgent.start(make_socket_folder(), Path(sys.argv[1]))
print(agent.socket, flush=True)
time.sleep(60)
"""


def test_a_worker_killed_with_sigkill_leaves_no_agent(tmp_path: Path) -> None:
    key = ensure_node_key(tmp_path / "ssh" / "nodes_ed25519")
    worker = subprocess.Popen(
        [sys.executable, "-c", START_AN_AGENT, str(key)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert worker.stdout is not None
        socket = Path(worker.stdout.readline().strip())
        assert socket.is_socket()
        agent = [pid for pid in _pids() if _cmdline(pid).split(b"\0")[0].endswith(b"ssh-agent")]
        assert [pid for pid in agent if str(socket).encode() in _cmdline(pid)]
        listed = subprocess.run(
            ["ssh-add", "-l"], env={**os.environ, "SSH_AUTH_SOCK": str(socket)}, check=False
        )
        assert listed.returncode == 0  # the agent holds the key

        os.kill(worker.pid, signal.SIGKILL)
        worker.wait(5)

        wait_until(
            lambda: not [pid for pid in _pids() if str(socket).encode() in _cmdline(pid)],
            timeout=5,
            what="the agent and its reaper to end",
        )
        assert not socket.exists()
        socket.parent.rmdir()  # what a killed worker leaves: the empty folder
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
        if worker.stdout is not None:
            worker.stdout.close()


def _sleeping(build_uuid: str) -> bool:
    return any(_cmdline(pid).startswith(b"sleep\0") for pid in processes_of_build(build_uuid))


def _pids() -> list[int]:
    return [int(entry) for entry in os.listdir("/proc") if entry.isdigit()]


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def test_the_inventory_names_nodes_as_the_nodeset_with_groups_and_job_vars() -> None:
    nodes = (
        {**node("10.0.0.1", 22), "provider": "static", "groups": ["ctl"]},
        {"name": "node2", "id": "43", "label": "arm", "connection": {"host": "10.0.0.2"}},
    )

    found = inventory(nodes, {"colour": "blue"})

    assert found == {
        "all": {
            "hosts": {
                "node1": {
                    "ansible_host": "10.0.0.1",
                    "ansible_port": 22,
                    "ansible_user": "root",
                    "nodepool": {
                        "label": "debian",
                        "provider": "static",
                        "host_id": "0000000042",
                        "interface_ip": "10.0.0.1",
                    },
                },
                "node2": {
                    "ansible_host": "10.0.0.2",
                    "nodepool": {
                        "label": "arm",
                        "provider": "",
                        "host_id": "43",
                        "interface_ip": "10.0.0.2",
                    },
                },
            },
            "vars": {"colour": "blue"},
            "children": {"ctl": {"hosts": {"node1": None}}},
        }
    }


@pytest.mark.parametrize(
    ("ref", "change"),
    [
        ("refs/changes/34/1234/5", {"change": "1234", "patchset": "5"}),
        ("refs/pull/17/head", {"change": "17"}),
        ("refs/merge-requests/8/head", {"change": "8"}),
        ("refs/heads/main", {}),
    ],
)
def test_zuul_change_and_patchset_come_from_the_ref(
    repo: Repo, tmp_path: Path, ref: str, change: dict[str, str]
) -> None:
    spec = make_spec(repo, repo.commit(), ref=ref)
    layout = BuildLayout.for_build(tmp_path, spec.context.build_uuid)

    found = zuul_vars(spec, layout, {"org/project": "main"})

    assert {k: found[k] for k in ("change", "patchset") if k in found} == change
    assert found["projects"]["org/project"]["checkout"] == "main"
    assert found["executor"]["src_root"] == str(layout.src_dir)


def test_zuul_artifacts_are_the_ones_the_scheduler_gave(repo: Repo, tmp_path: Path) -> None:
    spec = make_spec(repo, repo.commit())
    layout = BuildLayout.for_build(tmp_path, spec.context.build_uuid)
    assert "artifacts" not in zuul_vars(spec, layout, {})
    given = ({"name": "image", "url": "https://r.example/app:1", "project": "org/project"},)
    spec = replace(spec, context=replace(spec.context, artifacts=given))
    assert zuul_vars(spec, layout, {})["artifacts"] == list(given)
