"""failure-output through the request queue: one ``request-prefailed`` event, nudged."""

from __future__ import annotations

from pathlib import Path

import pytest

from scheduler.stores.job_requests import JobRequest
from scheduler.wire.events import RequestEvent
from tests.executor.helpers import Repo, make_spec
from tests.executor_e2e.conftest import Builds
from workers.claims import Delivery
from workers.executor import Result, RunnerOptions
from workers.executor.service import execute_request


@pytest.fixture
def options(tmp_path: Path) -> RunnerOptions:
    return RunnerOptions(state_dir=tmp_path / "worker-state", poll_interval=0.1, kill_grace=0.5)


def test_matching_lines_send_exactly_one_prefailed_event(
    builds: Builds, repo: Repo, options: RunnerOptions
) -> None:
    repo.script("run.sh", 'for i in 1 2 3; do echo "FAIL: case $i"; done\necho done')
    spec = make_spec(repo, repo.commit(), failure_output=("^FAIL: ",))
    request = builds.submit(spec)
    queue = builds.queue()
    nudges: list[str] = []

    def notify(nudged: JobRequest, /, delay: float = 0.0) -> None:
        nudges.append(nudged.uuid)

    report = execute_request(queue, request.uuid, "worker-1", options, notify, started_delay=30)

    assert report.outcome is Delivery.COMPLETED and report.result is Result.FAILURE
    assert [kind for kind, _ in builds.events()] == [
        RequestEvent.STARTED.value,
        RequestEvent.PREFAILED.value,
        RequestEvent.COMPLETED.value,
    ]
    assert nudges == [request.uuid, request.uuid]  # the pre-fail's, the completion's
    result = queue.get_result(request.uuid)
    assert result is not None
    assert result.result["message"] == "failure-output matched: FAIL: case 1"


def test_a_prefail_after_the_completion_writes_nothing(
    builds: Builds, repo: Repo, options: RunnerOptions
) -> None:
    repo.script("run.sh", "echo fine")
    request = builds.submit(make_spec(repo, repo.commit()))
    queue = builds.queue()
    claimed = queue.claim(request.uuid, "worker-1")
    assert claimed is not None
    assert queue.complete(claimed, {"result": "SUCCESS"})
    assert queue.prefail(claimed) is False
    assert [kind for kind, _ in builds.events()] == [
        RequestEvent.STARTED.value,
        RequestEvent.COMPLETED.value,
    ]
