"""What the job sees: environment, vars file, result data file, parent data."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.executor.helpers import Repo, make_spec
from workers.executor import BaseControl, Result, RunnerOptions, run_build

DUMP_ENV = """
env > "$SLUICE_LOG_DIR/env-$SLUICE_PHASE"
pwd > "$SLUICE_LOG_DIR/cwd"
"""


def read_env(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)


def test_environment_names_the_build(
    repo: Repo, options: RunnerOptions, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SLUICE_BROKER_URL", "redis://:secret@broker/0")
    repo.script("dump.sh", DUMP_ENV)
    spec = make_spec(repo, repo.commit(), run=("dump.sh",), post_run=("dump.sh",))

    result = run_build(spec, BaseControl(), options)

    assert result.result is Result.SUCCESS, result.message
    log_dir = Path(result.log_path).parent
    env = read_env(log_dir / "env-run")
    workspace = options.state_dir / "builds" / spec.context.build_uuid
    project_dir = workspace / "src" / "org" / "project"
    assert {k: v for k, v in env.items() if k.startswith("SLUICE_")} == {
        "SLUICE_TENANT": "tenant-one",
        "SLUICE_PIPELINE": "check",
        "SLUICE_PROJECT": "org/project",
        "SLUICE_BRANCH": "main",
        "SLUICE_REF": "refs/changes/01/1/1",
        "SLUICE_JOB": "unit-tests",
        "SLUICE_BUILD": spec.context.build_uuid,
        "SLUICE_PHASE": "run",
        "SLUICE_WORKSPACE": str(workspace),
        "SLUICE_SRC_DIR": str(workspace / "src"),
        "SLUICE_PROJECT_DIR": str(project_dir),
        "SLUICE_LOG_DIR": str(log_dir),
        "SLUICE_VARS_FILE": str(workspace / "sluice" / "vars.json"),
        "SLUICE_RESULT_FILE": str(workspace / "sluice" / "result.json"),
    }
    assert env["HOME"] == str(workspace / "home")
    assert env["TMPDIR"] == str(workspace / "tmp")
    assert "secret" not in (log_dir / "env-run").read_text()
    assert (log_dir / "cwd").read_text().strip() == str(project_dir)
    post_env = read_env(log_dir / "env-post-run")
    assert post_env["SLUICE_PHASE"] == "post-run"
    assert post_env["SLUICE_SUCCESS"] == "true"


def test_vars_file_holds_job_vars_over_parent_data(repo: Repo, options: RunnerOptions) -> None:
    repo.script("run.sh", 'cp "$SLUICE_VARS_FILE" "$SLUICE_LOG_DIR/vars.json"')
    spec = make_spec(
        repo,
        repo.commit(),
        vars={"greeting": "hello", "nested": {"a": 1}, "list": [1, 2]},
        parent_data={"greeting": "parent", "nested": {"b": 2}, "zuul": {"pause": True}},
    )

    result = run_build(spec, BaseControl(), options)

    job_vars = json.loads((Path(result.log_path).parent / "vars.json").read_text())
    assert job_vars == {"greeting": "hello", "nested": {"a": 1, "b": 2}, "list": [1, 2]}


WRITE_DATA = """
cat > "$SLUICE_RESULT_FILE" <<'JSON'
{"artifact": {"url": "https://logs/x.tar"}, "answer": 42}
JSON
"""

USE_PARENT_DATA = """
python3 - <<'PY'
import json, os
data = json.load(open(os.environ["SLUICE_VARS_FILE"]))
assert data["artifact"]["url"] == "https://logs/x.tar", data
print("got", data["artifact"]["url"], data["answer"])
PY
"""


def test_result_data_reaches_a_dependent_job(repo: Repo, options: RunnerOptions) -> None:
    repo.script("produce.sh", WRITE_DATA)
    repo.script("consume.sh", USE_PARENT_DATA)
    commit = repo.commit()
    parent = run_build(make_spec(repo, commit, run=("produce.sh",)), BaseControl(), options)
    assert parent.result is Result.SUCCESS, parent.message
    assert parent.result_data == {"artifact": {"url": "https://logs/x.tar"}, "answer": 42}

    child_spec = make_spec(
        repo, commit, run=("consume.sh",), name="child", parent_data=parent.result_data
    )
    child = run_build(child_spec, BaseControl(), options)

    assert child.result is Result.SUCCESS, child.log_tail
    assert any(line.endswith("| run | got https://logs/x.tar 42") for line in child.log_tail)


@pytest.mark.parametrize(
    ("script", "message"),
    [
        ("echo '{not json' > \"$SLUICE_RESULT_FILE\"", "result data file is not valid JSON"),
        ("echo '[1, 2]' > \"$SLUICE_RESULT_FILE\"", "result data must be a JSON object, got list"),
        (
            'printf "%2000s{}" "" > "$SLUICE_RESULT_FILE"',
            "result data is larger than the limit of 1000 bytes",
        ),
        (
            'rm "$SLUICE_RESULT_FILE"; ln -s "$SLUICE_VARS_FILE" "$SLUICE_RESULT_FILE"',
            "result data file is a symlink",
        ),
        (
            'rm "$SLUICE_RESULT_FILE"; mkfifo "$SLUICE_RESULT_FILE"',
            "result data file is not a regular file",
        ),
    ],
    ids=["invalid-json", "not-an-object", "too-large", "symlink", "fifo"],
)
def test_invalid_result_data_fails_the_build(
    repo: Repo, options: RunnerOptions, script: str, message: str
) -> None:
    repo.script("run.sh", script)
    limited = RunnerOptions(
        state_dir=options.state_dir, poll_interval=0.1, kill_grace=0.5, result_data_limit=1000
    )

    result = run_build(make_spec(repo, repo.commit()), BaseControl(), limited)

    assert result.result is Result.FAILURE
    assert message in result.message
    assert result.result_data == {}


def test_invalid_result_data_keeps_a_worse_result(repo: Repo, options: RunnerOptions) -> None:
    repo.script("run.sh", 'echo nope > "$SLUICE_RESULT_FILE"; exit 2')

    result = run_build(make_spec(repo, repo.commit()), BaseControl(), options)

    assert result.result is Result.FAILURE
    assert result.message.startswith("run run.sh failed with exit code 2; result data file")


def test_no_result_data_is_empty(repo: Repo, options: RunnerOptions) -> None:
    repo.script("run.sh", 'rm "$SLUICE_RESULT_FILE"')

    result = run_build(make_spec(repo, repo.commit()), BaseControl(), options)

    assert result.result is Result.SUCCESS
    assert result.result_data == {}
