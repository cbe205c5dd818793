"""``zuul_return``: real playbooks merge data into the build's result data.

The build tests run without a sandbox and in bubblewrap
(``executor.sandbox``), as in ``test_ansible.py``; nothing is mocked. The
last tests call the plugin's merge directly (its file rules, its lock).
"""

from __future__ import annotations

import json
import os
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path

import pytest

from cli.stack.process import free_port
from tests.executor.helpers import BuildThread, Repo, make_spec
from workers.executor import BaseControl, LocalControl, Phase, Result, RunnerOptions, run_build
from workers.executor.ansible_plugins.action.zuul_return import (
    ReturnError,
    merge_into_result_file,
)


@pytest.fixture(params=["none", "bwrap"])
def sandboxed(request: pytest.FixtureRequest, options: RunnerOptions) -> RunnerOptions:
    return replace(options, sandbox=request.param)


def log_of(result_log: str) -> str:
    return Path(result_log).read_text()


# A script's data first, then a file's, then two calls: later values win,
# nested objects merge, lists are replaced.
TWO_CALLS = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: write a file of data
      copy:
        dest: "{{ zuul.executor.work_root }}/returned.json"
        content: '{"from_file": true, "shared": {"file": 1}}'
    - name: first return
      zuul_return:
        file: "{{ zuul.executor.work_root }}/returned.json"
        data:
          shared: {first: 1, both: first}
          items: [1, 2]
          job: "{{ zuul.job }}"
    - name: second return
      zuul_return:
        data:
          shared: {second: 2, both: second}
          items: [3]
"""


def test_two_calls_merge_into_the_result_data(repo: Repo, sandboxed: RunnerOptions) -> None:
    repo.write("playbooks/run.yaml", TWO_CALLS)
    script_data = json.dumps({"from_script": 1, "shared": {"script": 1}})
    repo.script("pre.sh", f"echo '{script_data}' > \"$SLUICE_RESULT_FILE\"")
    spec = make_spec(repo, repo.commit(), pre_run=("pre.sh",), run=("playbooks/run.yaml",))

    result = run_build(spec, BaseControl(), sandboxed)

    assert result.result is Result.SUCCESS, (result.message, log_of(result.log_path))
    assert result.result_data == {
        "from_script": 1,
        "from_file": True,
        "shared": {"script": 1, "file": 1, "first": 1, "second": 2, "both": "second"},
        "items": [3],
        "job": "unit-tests",
    }
    text = log_of(result.log_path)
    assert "| run | TASK [second return]" in text
    assert "| run | localhost | changed" in text


# The task targets nodes that nothing answers for: it runs on the executor,
# once per host, and never tries to reach them.
ON_NODES = """
- hosts: all
  gather_facts: false
  tasks:
    - name: return from every node
      zuul_return:
        data:
          nodes: "{{ {inventory_hostname: nodepool.label} }}"
          seen: "{{ inventory_hostname }}"
"""


def test_a_call_on_nodes_runs_on_the_executor_once_per_host(
    repo: Repo, sandboxed: RunnerOptions
) -> None:
    repo.write("playbooks/run.yaml", ON_NODES)
    nodes = tuple(
        {
            "name": name,
            "id": f"000000004{index}",
            "label": "debian",
            "connection": {"host": "127.0.0.1", "port": free_port(), "username": "root"},
        }
        for index, name in enumerate(("node1", "node2"))
    )
    spec = make_spec(repo, repo.commit(), run=("playbooks/run.yaml",), nodes=nodes)

    result = run_build(spec, BaseControl(), sandboxed)

    assert result.result is Result.SUCCESS, (result.message, log_of(result.log_path))
    assert result.result_data["seen"] in ("node1", "node2")
    assert result.result_data["nodes"] == {"node1": "debian", "node2": "debian"}
    text = log_of(result.log_path)
    assert "node1 | ok=1 changed=1 unreachable=0 failed=0" in text
    assert "node2 | ok=1 changed=1 unreachable=0 failed=0" in text


PAUSE = """
- hosts: localhost
  gather_facts: false
  tasks:
    - zuul_return:
        data:
          registry: "127.0.0.1:5000"
          zuul: {pause: true}
"""


def test_zuul_pause_pauses_the_build_after_run(repo: Repo, sandboxed: RunnerOptions) -> None:
    repo.write("playbooks/run.yaml", PAUSE)
    repo.script("post.sh", 'echo post-run ran > "$SLUICE_LOG_DIR/post"')
    spec = make_spec(repo, repo.commit(), run=("playbooks/run.yaml",), post_run=("post.sh",))
    control = LocalControl()
    build = BuildThread(spec, control, sandboxed)

    assert control.paused.wait(60), "the build did not pause"
    assert control.paused_data == {"registry": "127.0.0.1:5000", "zuul": {"pause": True}}
    post = sandboxed.state_dir / "logs" / spec.context.build_uuid / "post"
    assert not post.exists()  # post-run waits for the resume
    control.resume()
    result = build.join(timeout=60)

    assert result.result is Result.SUCCESS, (result.message, log_of(result.log_path))
    assert post.read_text() == "post-run ran\n"
    text = log_of(result.log_path)
    assert text.index("PAUSED") < text.index("RESUMED") < text.index("POST-RUN START")


NO_RETRY = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: no point in trying again
      zuul_return:
        data:
          zuul: {retry: false}
    - name: fail here
      command: "false"
"""


def test_retry_false_in_a_failing_pre_run_is_failure_not_retry(
    repo: Repo, sandboxed: RunnerOptions
) -> None:
    repo.write("playbooks/pre.yaml", NO_RETRY)
    repo.script("run.sh", "echo never")
    spec = make_spec(repo, repo.commit(), pre_run=("playbooks/pre.yaml",))

    result = run_build(spec, BaseControl(), sandboxed)

    assert result.result is Result.FAILURE, (result.message, log_of(result.log_path))
    assert result.message == "pre-run playbooks/pre.yaml failed with exit code 2"
    assert result.result_data == {"zuul": {"retry": False}}
    assert [s.phase for s in result.steps] == [Phase.PRE_RUN]


TOO_MUCH = """
- hosts: localhost
  gather_facts: false
  tasks:
    - zuul_return:
        data: {kept: true}
    - name: too much
      zuul_return:
        data:
          big: "{{ 'x' * 200000 }}"
"""


def test_a_refused_call_fails_the_task_and_keeps_the_data(
    repo: Repo, options: RunnerOptions
) -> None:
    repo.write("playbooks/run.yaml", TOO_MUCH)
    spec = make_spec(repo, repo.commit(), run=("playbooks/run.yaml",))

    result = run_build(spec, BaseControl(), replace(options, result_data_limit=100_000))

    assert result.result is Result.FAILURE
    assert result.result_data == {"kept": True}
    assert (  # the executor's limit (result_data_limit), not the plugin's default
        "localhost | FAILED: zuul_return: result data would be larger than the limit "
        "of 100000 bytes" in log_of(result.log_path)
    )


# -- the merge itself, without Ansible ----------------------------------------


@pytest.fixture
def result_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "sluice" / "result.json"
    path.parent.mkdir()
    path.write_bytes(b"")
    monkeypatch.setenv("SLUICE_RESULT_FILE", str(path))
    monkeypatch.setenv("SLUICE_RESULT_DATA_LIMIT", "4096")
    return path


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        ("[1, 2]", "the result data file must hold a JSON object, not list"),
        ("{not json", "the result data file is not valid JSON"),
        ("x" * 5000, "is larger than the limit of 4096 bytes"),
    ],
)
def test_a_broken_result_file_is_refused_and_left_as_it_is(
    result_file: Path, content: str, reason: str
) -> None:
    result_file.write_text(content)

    with pytest.raises(ReturnError, match=reason.replace("[", r"\[")):
        merge_into_result_file(None, {"a": 1})

    assert result_file.read_text() == content


def test_a_symlinked_result_file_is_refused(result_file: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text("{}")
    result_file.unlink()
    result_file.symlink_to(elsewhere)

    with pytest.raises(ReturnError, match="is a symlink"):
        merge_into_result_file(None, {"a": 1})

    assert elsewhere.read_text() == "{}"


def _return_keys(prefix: str) -> None:
    for index in range(20):
        merge_into_result_file(None, {"keys": {f"{prefix}-{index}": index}})


def test_parallel_calls_lose_nothing(result_file: Path) -> None:
    """Hosts of one task run in parallel forks: the lock keeps every update."""
    with ProcessPoolExecutor(max_workers=4) as pool:
        list(pool.map(_return_keys, [f"host{n}" for n in range(4)]))

    data = json.loads(result_file.read_text())
    assert len(data["keys"]) == 80
    assert not [name for name in os.listdir(result_file.parent) if name != "result.json"]
