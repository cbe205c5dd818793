"""Executors and mergers on several hosts: the speculative state merged again where needed.

Each "host" is a worker with a state dir (and so a repo cache) of its own.
The executor runs with ``executor.merge_here``, so it never borrows the
merger's objects: for every build it merges the item's changes again from
the merge request recorded in ZooKeeper, fetching from the connection.
The second change's job checks that the first change (ahead of it in the
gate) is in its checkout: the speculative state, not just the branch.

While the builds run, the merger that merged the items stops and another,
on a third host, takes over: it is asked to push commits it never made,
makes them again from the same merge requests, and pushes exactly those.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.e2e.system import TENANT_YAML, SluiceSystem
from tests.fixtures.waiting import wait_until

CONFIG = {
    "zuul.d/pipelines.yaml": """
        - pipeline:
            name: gate
            manager: dependent
            success:
              local:
                merge: true
        - job:
            name: base
            parent: null
            timeout: 120
        """,
}

APP = {
    ".zuul.yaml": """
        - job:
            name: unit
            run: ci/unit.sh
        - project:
            gate:
              jobs: [unit]
        """,
    # a change may name, in NEEDS, a file that must be in its checkout; every
    # build waits for the test's go (a file named by the job's vars)
    "ci/unit.sh": (
        "#!/bin/sh\nset -e\n"
        'if [ -e NEEDS ]; then test -e "$(cat NEEDS)"; fi\n'
        "while [ ! -e {release} ]; do sleep 0.1; done\n"
    ),
    "src/app.py": "value = 1\n",
}


def test_an_executor_without_the_mergers_cache_merges_again(
    system: SluiceSystem, tmp_path: Path
) -> None:
    release = tmp_path / "release"
    system.tenant(TENANT_YAML)
    system.repos.commit("config", "main", CONFIG)
    app = {**APP, "ci/unit.sh": APP["ci/unit.sh"].format(release=release)}
    base = system.repos.commit("app", "main", app)
    system.repos.git("app", "checkout", "-q", "--detach")
    system.repos.commit("app", "c1", {"src/one.py": "1\n"}, base=base)
    system.repos.commit("app", "c2", {"src/two.py": "2\n", "NEEDS": "src/one.py\n"}, base=base)
    system.repos.git("app", "checkout", "-q", "--detach")
    system.config.write_text(system.config.read_text() + "executor:\n  merge_here: true\n")

    system.start_worker(("scheduler", "maintenance"))
    first_merger = system.start_worker(("merger",))
    elsewhere = tmp_path / "executor-host"
    executor = system.start_worker(("executor",), env={"SLUICE_STATE_DIR": str(elsewhere)})
    system.sluice("reconfigure")
    for ref in ("c1", "c2"):
        system.enqueue(ref, "gate")
    wait_until(
        lambda: executor.log_text().count("merged again here") == 2,
        60,
        "both builds to run on the executor's own merges",
    )
    first_merger.stop()
    third_host = tmp_path / "merger-host"
    second_merger = system.start_worker(("merger",), env={"SLUICE_STATE_DIR": str(third_host)})
    release.touch()
    system.sluice("wait", "--idle", "--timeout", "120")

    results = {b["ref"]: b["result"] for b in system.buildsets()}
    assert results == {"c1": "SUCCESS", "c2": "SUCCESS"}, system.buildsets()
    files = system.repos.git("app", "ls-tree", "-r", "--name-only", "main").split()
    assert "src/one.py" in files and "src/two.py" in files
    log = executor.log_text()
    assert log.count("merged again here") == 2, log[-3000:]
    # c1 fast-forwards main to its own commit (in the origin already); c2's
    # merge commit was only in the first merger's cache: made again to push it
    pushes = second_merger.log_text()
    assert pushes.count("merged again here") == 1, pushes[-3000:]
    repos = [p for p in (elsewhere / "git" / "local").iterdir() if (p / "HEAD").is_file()]
    assert repos, "the executor's own repo cache"
    for repo in repos:  # it holds no refs of the builds once they ended
        left = subprocess.run(
            ["git", "--git-dir", str(repo), "for-each-ref", "refs/sluice/jobs/"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert left == "", (repo, left)
