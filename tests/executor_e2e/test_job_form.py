"""One form of a job from freezing to the executor, through a real ZooKeeper build request.

The scheduler freezes a job (``FrozenJob``), keeps its plain form with the
buildset (``JobInfo``, stored as the pipeline state stores it), writes it
into a build request with the build's context (``WireFormats.build``); the
executor's service claims the request and reads it. What reaches
``run_build`` is the job as it was frozen, equal (``==``) to it, with a
context narrowed to the projects the job uses.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from scheduler import crypto
from scheduler.config.graph import freeze_job_graph
from scheduler.layouts.source import job_info
from scheduler.manager.intents import BuildIntent
from scheduler.model.build import Build, JobInfo
from scheduler.model.change import Change
from scheduler.model.item import BuildSet, QueueItem
from scheduler.model.results import Result
from scheduler.processing.formats import WireFormats
from scheduler.stores.job_requests import JobRequestQueue
from scheduler.stores.keystore import KeyStore
from scheduler.wire.build_result import BuildResult
from scheduler.zk import stored
from scheduler.zk.client import ZooKeeperClient, connect
from tests.config.builders import BASE, build, dedent
from tests.fixtures.services import ZooKeeperTarget
from workers.claims import Delivery
from workers.executor import BuildContext, BuildSpec, Phase, RunnerOptions, service
from workers.executor.job import steps

PASSWORD = "correct horse battery staple"
CONFIG_BEFORE = "c" * 40  # config's master before the item's merge moved it
REPO_STATE = {
    "app": {"main": "a" * 40},
    "config": {"master": "b" * 40},
    "lib": {"main": "d" * 40, "stable": "e" * 40},
    "unrelated": {"main": "f" * 40},  # in the item's repo state, not used by the job
}

CONFIG = """
- secret:
    name: creds
    data:
      user: deployer
      password: !encrypted/pkcs1-oaep
        - {chunk}
- job:
    name: deploy
    run: playbooks/deploy.sh
    post-run: playbooks/collect.sh
    vars:
      nested: {{list: [1, {{a: null}}], unicode: "caf\\u00e9"}}
    required-projects:
      - name: lib
        override-checkout: stable
    secrets:
      - name: site
        secret: creds
    tags: [deploy]
"""

APP = """
- project:
    check:
      jobs: [deploy]
"""


@pytest.fixture
def client(zookeeper: ZooKeeperTarget) -> Iterator[ZooKeeperClient]:
    zk = connect(zookeeper.settings())
    yield zk
    zk.stop()
    zk.close()


def test_the_executor_holds_the_job_as_it_was_frozen(
    client: ZooKeeperClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the scheduler's side: freeze, keep with the buildset, write the request
    pem = KeyStore(client, PASSWORD, bits=2048).public_pem("git", "config")
    chunk = crypto.encrypt_pkcs1_oaep(pem, b"s3cret")[0]
    config = dedent(BASE) + dedent(CONFIG.format(chunk=chunk))
    result = build(
        {"config": {"master": {"zuul.yaml": config}}, "app": {"main": {".zuul.yaml": APP}}}
    )
    assert not result.errors, [str(e) for e in result.errors]
    graph = freeze_job_graph(result.layout, "app", "main", "check", None)
    frozen = graph.job("deploy")
    assert frozen is not None
    info = JobInfo.from_dict(stored.decode(stored.encode(job_info(frozen, graph).to_dict())))

    buildset = BuildSet(
        uuid="bs-1",
        merge_request="merge-1",
        repo_state=REPO_STATE,
        base_state={"config": {"master": CONFIG_BEFORE}},
    )
    change = Change("git", "app", "main", "refs/changes/01/1/1", "9" * 40)
    item = QueueItem("item-1", change, "app", buildset, enqueue_time=0.0)
    build_record = Build(uuid="build-1", job="deploy", attempt=1)
    intent = BuildIntent("item-1", "bs-1", build_record, info, {"artifact": "x"})
    formats = WireFormats(lambda tenant, project: "git", lambda c, p: f"https://git.example/{p}")
    new = formats.build("example", "check", item, intent)
    queue = JobRequestQueue(client, new.queue_root)
    queue.submit(new.request, new.params)

    # the executor's side: the real service reads the request; the runner is the test
    seen: list[tuple[BuildSpec, dict[str, Any]]] = []

    def runner(
        spec: BuildSpec, control: object, options: object, plain: dict[str, Any]
    ) -> BuildResult:
        seen.append((spec, plain))
        now = time.time()
        return BuildResult(spec.context.build_uuid, Result.SUCCESS, "", now, now)

    monkeypatch.setattr(service, "run_build", runner)
    options = RunnerOptions(state_dir=tmp_path / "state", keystore_password=PASSWORD)
    report = service.execute_request(queue, "build-1", "worker-1", options)

    assert report.outcome is Delivery.COMPLETED and report.result is Result.SUCCESS
    [(spec, plain)] = seen
    assert spec.job == frozen  # one form: the job as it was frozen
    assert queue.params("build-1")["job"] == frozen.to_dict()  # carried as it is
    used = {p: REPO_STATE[p] for p in ("app", "config", "lib")}
    assert spec.context == BuildContext(
        tenant="example",
        build_uuid="build-1",
        ref="refs/changes/01/1/1",
        repo_state=used,
        sources={p: f"https://git.example/{p}" for p in used},
        base_state={"config": {"master": CONFIG_BEFORE}},
        parent_data={"artifact": "x"},
        merge_request="merge-1",
        connections={p: "git" for p in used},
    )
    # what the executor makes of the two: trusted steps before the merge, secrets decrypted
    assert [(s.path, s.commit) for s in steps(spec, Phase.RUN)] == [
        ("playbooks/deploy.sh", CONFIG_BEFORE)
    ]
    assert plain == {"config@master:creds": {"user": "deployer", "password": "s3cret"}}
