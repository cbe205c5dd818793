"""Zuul's provides/requires between changes in a gate, on real workers.

Change c1 builds an "image" (its ``build-image`` job returns it as a
``zuul.artifacts`` entry); c2, behind it in the gate, runs ``use-image``,
which ``requires: image``: it waits for c1's ``build-image`` and its
playbook finds c1's artifact in ``zuul.artifacts``. A provider that failed
fails the requirer with Zuul's message; a provider whose change merged
already is not waited for.

And in check through a fake GitHub: a pull request that Depends-On one
checked earlier (no longer in the pipeline) gets its image from what that
change's last buildset left, or fails with Zuul's message if its provider
failed.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.system import TENANT_YAML, SluiceSystem
from tests.e2e.test_gate import change, gate_config
from tests.fixtures.fake_github import Pull
from tests.fixtures.waiting import wait_until
from tests.web.test_github_journey import CONFIG as GITHUB_CONFIG
from tests.web.test_github_journey import final, forge_system


def image_jobs(pipeline: str, provider_option: str = "", project: str = "") -> str:
    """build-image provides "image", use-image requires it, both in ``pipeline``."""
    name = f"name: {project}\n            " if project else ""
    return f"""
        - job:
            name: build-image
            run: ci/build-image.sh
            provides: image
            {provider_option}
        - job:
            name: use-image
            run: ci/use-image.yaml
            requires: [image]
        - project:
            {name}{pipeline}:
              jobs: [build-image, use-image]
        """


APP = {
    # the provider does not vote: a change whose image fails still merges
    ".zuul.yaml": image_jobs("gate", "voting: false"),
    # returns its image as an artifact; a change with FAIL_IMAGE breaks it
    "ci/build-image.sh": (
        "#!/bin/sh\n"
        "sleep 2\n"
        "test ! -e FAIL_IMAGE || exit 1\n"
        'printf \'{"zuul": {"artifacts": [{"name": "image", "url": "%s", '
        '"metadata": {"type": "container_image"}}]}}\' '
        '"registry.example/app:$SLUICE_REF" > "$SLUICE_RESULT_FILE"\n'
    ),
    "ci/use-image.yaml": """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: show what it received
      debug:
        msg: "ARTIFACTS={{ zuul.artifacts | default([]) | to_json }}"
""",
}


@pytest.fixture
def gate(system: SluiceSystem) -> SluiceSystem:
    system.tenant(TENANT_YAML)
    system.repos.commit("config", "main", gate_config())
    system.base = system.repos.commit("app", "main", APP)  # type: ignore[attr-defined]
    system.repos.git("app", "checkout", "-q", "--detach")  # the merge queue pushes to main
    return system


def builds_of(system: SluiceSystem) -> dict[tuple[str, str], dict[str, Any]]:
    """The last build of each (ref, job)."""
    return {(b["ref"], b["job"]): b for b in system.builds()}


def gate_two(system: SluiceSystem, first: dict[str, str]) -> dict[tuple[str, str], Any]:
    """c1 (with ``first``) and c2 gated together, to the end; their builds."""
    change(system, "c1", first)
    change(system, "c2", {"src/two.py": "2\n"})
    system.start_workers()
    system.sluice("reconfigure")
    for ref in ("c1", "c2"):
        system.enqueue(ref, "gate")
    system.sluice("wait", "--idle", "--timeout", "180")
    return builds_of(system)


def received(build: dict[str, Any]) -> list[dict[str, Any]]:
    """The artifacts the use-image playbook printed."""
    log = Path(build["log_url"]).read_text()
    match = re.search(r"ARTIFACTS=(\[.*?\])\"?$", log, re.MULTILINE)
    assert match is not None, log
    found: list[dict[str, Any]] = json.loads(match.group(1).replace('\\"', '"'))
    return found


def test_the_change_behind_receives_the_image_of_the_change_ahead(gate: SluiceSystem) -> None:
    builds = gate_two(gate, {"src/one.py": "1\n"})
    assert {key: b["result"] for key, b in builds.items()} == {
        ("c1", "build-image"): "SUCCESS",
        ("c1", "use-image"): "SUCCESS",
        ("c2", "build-image"): "SUCCESS",
        ("c2", "use-image"): "SUCCESS",
    }
    assert received(builds["c1", "use-image"]) == []  # nothing ahead of c1
    assert received(builds["c2", "use-image"]) == [
        {
            "name": "image",
            "url": "registry.example/app:c1",
            "metadata": {"type": "container_image"},
            "project": "app",
            "branch": "main",
            "job": "build-image",
        }
    ]
    # c2's requirer started only once c1's provider had ended
    assert builds["c2", "use-image"]["start_time"] >= builds["c1", "build-image"]["end_time"]


def test_a_failed_provider_fails_the_requirer_and_a_merged_one_is_not_required(
    gate: SluiceSystem,
) -> None:
    builds = gate_two(gate, {"FAIL_IMAGE": "x\n"})
    failed = builds["c1", "build-image"]
    assert failed["result"] == "FAILURE"  # non-voting: c1 merges all the same
    requirer = builds["c2", "use-image"]
    assert requirer["result"] == "FAILURE"
    assert requirer["error_detail"] == (
        f"Job use-image requires artifact(s) image provided by build {failed['uuid']} "
        '(triggered by change c1 on project app), but that build failed with result "FAILURE"'
    )
    results = {b["ref"]: b["result"] for b in gate.buildsets()}
    assert results == {"c1": "SUCCESS", "c2": "FAILURE"}

    # c1 merged with its failed provider: a change enqueued now does not wait for it
    change(gate, "c3", {"src/three.py": "3\n"})
    gate.enqueue("c3", "gate")
    gate.sluice("wait", "--idle", "--timeout", "120")
    builds = builds_of(gate)
    assert builds["c3", "use-image"]["result"] == "SUCCESS"
    assert received(builds["c3", "use-image"]) == []


# -- Depends-On in check, through a fake GitHub ---------------------------------

FORGE_JOBS = {
    "zuul.d/provides.yaml": image_jobs("check", project="org/app"),
    "ci/build-image.sh": APP["ci/build-image.sh"],
    "ci/use-image.yaml": APP["ci/use-image.yaml"],
}


def test_a_depends_on_change_checked_earlier_gives_its_image_or_its_failure(
    system: SluiceSystem,
) -> None:
    """Zuul's speculative images in check: the dependency left the pipeline, its record counts."""
    with forge_system(system, {**GITHUB_CONFIG, **FORGE_JOBS}) as (forge, _web):
        base = system.repos.git("org/app", "rev-parse", "main")
        system.repos.commit("org/app", "one", {"src/one.py": "1\n"}, base=base)
        system.repos.commit("org/app", "broken", {"FAIL_IMAGE": "x\n"}, base=base)
        for branch in ("two", "three"):
            system.repos.commit("org/app", branch, {f"src/{branch}.py": "2\n"}, base=base)
        system.repos.git("org/app", "checkout", "-q", "--detach")
        one = forge.open_pull("org/app", "one", "One")
        broken = forge.open_pull("org/app", "broken", "Broken")
        wait_until(lambda: final(forge, one) and final(forge, broken), 120, "checks", 0.5)
        assert (final(forge, one), final(forge, broken)) == (["success"], ["failure"])

        two = forge.open_pull("org/app", "two", "Two", body=f"Depends-On: {url(one)}\n")
        three = forge.open_pull("org/app", "three", "Three", body=f"Depends-On: {url(broken)}\n")
        wait_until(lambda: final(forge, two) and final(forge, three), 120, "checks", 0.5)
        system.sluice("wait", "--idle", "--timeout", "60")
        assert (final(forge, two), final(forge, three)) == (["success"], ["failure"])
        builds = builds_of(system)
        # two (#3) got one's (#1) image, as one's last buildset left it
        (image,) = received(builds["refs/pull/3/head", "use-image"])
        assert (image["url"], image["change"], image["job"]) == (
            "registry.example/app:refs/pull/1/head",
            "1",
            "build-image",
        )
        # three (#4) failed at once: broken's (#2) provider failed
        failed = builds["refs/pull/2/head", "build-image"]
        requirer = builds["refs/pull/4/head", "use-image"]
        assert requirer["result"] == "FAILURE"
        assert requirer["error_detail"] == (
            f"Job use-image requires artifact(s) image provided by build {failed['uuid']} "
            "(triggered by change 2 on project org/app), but that build failed with result "
            '"FAILURE"'
        )


def url(pull: Pull) -> str:
    return f"https://github.com/{pull.project}/pull/{pull.number}"
