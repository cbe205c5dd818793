"""Phases and their results with real scripts in real git repositories."""

from __future__ import annotations

import json
from pathlib import Path

from tests.executor.helpers import Repo, make_spec
from workers.executor import BaseControl, Phase, ResultCode, RunnerOptions, StepOutcome, run_build


def test_success_runs_every_phase_in_order(repo: Repo, options: RunnerOptions) -> None:
    for name in ("pre.sh", "run.sh", "post.sh"):
        repo.script(f"ci/{name}", f'echo "{name} in $(pwd)" >> "$SLUICE_LOG_DIR/order"')
    commit = repo.commit()
    spec = make_spec(
        repo, commit, pre_run=("ci/pre.sh",), run=("ci/run.sh",), post_run=("ci/post.sh",)
    )

    result = run_build(spec, BaseControl(), options)

    assert result.result is ResultCode.SUCCESS, result.message
    order = (Path(result.log_path).parent / "order").read_text().splitlines()
    project_dir = options.state_dir / "builds" / spec.build_uuid / "src" / "org/project"
    assert order == [f"{n} in {project_dir}" for n in ("pre.sh", "run.sh", "post.sh")]
    assert [s.phase for s in result.steps] == [Phase.PRE_RUN, Phase.RUN, Phase.POST_RUN]
    assert all(s.exit_code == 0 and s.outcome is StepOutcome.OK for s in result.steps)
    assert result.exit_codes(Phase.RUN) == [0]
    assert result.ended_at >= result.started_at
    json.dumps(result.to_dict())  # JSON-serializable as is
