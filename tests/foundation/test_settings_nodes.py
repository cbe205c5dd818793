"""The ``nodes:`` section of sluice.yaml: the documented example and errors that name the key."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cli.stack.local import LocalStack
from scheduler.errors import SettingsError
from scheduler.settings.load import parse_settings
from tests.foundation.test_settings_images import EXAMPLE as IMAGES

EXAMPLE = """\
nodes:
  check_interval: 2
  node_dir: nodes
  providers:
    - name: hosts
      driver: static
      labels: {ubuntu: 4, debian: 1}
      hosts:
        - name: 192.0.2.10
          labels: [ubuntu, debian]
          max_parallel_jobs: 2
        - name: 192.0.2.11
          labels: [ubuntu]
          username: ci
          port: 2222
    - name: sandbox
      driver: local
      image: base
      labels: {sandbox: 2}
"""


def test_the_documented_example(tmp_path: Path) -> None:
    nodes = parse_settings(EXAMPLE, "sluice.yaml", tmp_path).nodes
    assert nodes.check_interval == 2.0
    assert nodes.node_dir == tmp_path / "nodes"
    hosts = nodes.provider("hosts")
    assert hosts is not None and hosts.driver == "static"
    assert dict(hosts.labels) == {"ubuntu": 4, "debian": 1}
    first, second = hosts.hosts
    assert (first.name, first.labels, first.max_parallel_jobs) == (
        "192.0.2.10",
        ("ubuntu", "debian"),
        2,
    )
    assert (second.max_parallel_jobs, second.username, second.port) == (1, "ci", 2222)
    sandbox = nodes.provider("sandbox")
    assert sandbox is not None
    assert (sandbox.driver, sandbox.image, sandbox.image_provider) == ("local", "base", "local")
    assert parse_settings("", "sluice.yaml", tmp_path).nodes.providers == ()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("nodes:\n  providers:\n    - name: x\n      driver: cloud\n", "providers[0].driver"),
        (
            "nodes:\n  providers:\n    - name: x\n      driver: local\n      image: base\n",
            "providers[0].labels: required",
        ),
        (
            "nodes:\n  providers:\n    - name: x\n      driver: local\n      image: b\n"
            "      labels: {a: 0}\n",
            "providers[0].labels.a: the quota",
        ),
        (
            "nodes:\n  providers:\n    - name: x\n      driver: static\n      labels: {a: 1}\n"
            "      hosts:\n        - name: h\n          labels: [b]\n",
            "providers[0].hosts[0].labels: label 'b'",
        ),
        (
            "nodes:\n  providers:\n    - name: x\n      driver: static\n      labels: {a: 1}\n"
            "      hosts:\n        - name: h\n          labels: [a]\n"
            "          max_parallel_jobs: 0\n",
            "providers[0].hosts[0].max_parallel_jobs: must be at least 1",
        ),
        (
            "nodes:\n  providers:\n    - name: x\n      driver: local\n      labels: {a: 1}\n",
            "providers[0].image: required",
        ),
        ("nodes:\n  colour: red\n", "nodes.colour: unknown key"),
    ],
)
def test_errors_name_file_line_and_key(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(SettingsError) as caught:
        parse_settings(text, "sluice.yaml", tmp_path)
    assert message in str(caught.value)
    assert re.match(r"sluice\.yaml:\d+: nodes\.", str(caught.value)), str(caught.value)


def test_the_local_stack_runs_a_builder_and_a_launcher_when_asked(tmp_path: Path) -> None:
    core = ("scheduler", "merger", "executor", "maintenance")
    assert LocalStack(parse_settings("", "sluice.yaml", tmp_path)).stack_queues() == core
    both = parse_settings(IMAGES + EXAMPLE, "sluice.yaml", tmp_path)
    assert LocalStack(both).stack_queues() == (*core, "builder", "launcher")
