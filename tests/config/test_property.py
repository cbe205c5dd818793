"""Arbitrary YAML documents: a layout or config errors, never a crash."""

from __future__ import annotations

from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.config import (
    ConfigError,
    FreezeError,
    UnparsedBranch,
    build_layout,
    parse_tenant_config,
)
from scheduler.config.graph import freeze_job_graph
from scheduler.config.jobs import JOB_KEYS
from scheduler.config.parser import CONFIG_TYPES
from scheduler.config.pipelines import PIPELINE_KEYS
from scheduler.config.serialize import canonical_json
from tests.config.builders import BASE, CONNECTIONS, dedent, tenant

NAMES = ["base", "unit", "check", "gate", "app", "lib", "config", "db", "git", "timer", "github"]
KEYS = sorted(
    JOB_KEYS | PIPELINE_KEYS | {"jobs", "templates", "queue", "max", "per-branch", "soft"}
)

leaves = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-5, max_value=10**9)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=12)
    | st.sampled_from([*NAMES, "^src/.*", "(a+)+$", "../x", "playbooks/a.yaml", "[", ""])
)
keys = st.sampled_from(KEYS + NAMES) | st.text(max_size=6)
values = st.recursive(
    leaves,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=5),
    max_leaves=16,
)
objects = st.lists(
    st.dictionaries(
        st.sampled_from([*CONFIG_TYPES, "secret", "bogus"]),
        st.dictionaries(keys, values, max_size=8),
        min_size=1,
        max_size=1,
    ),
    max_size=6,
)


def _dump(value: Any) -> str:
    return yaml.safe_dump(value, allow_unicode=True)


documents = (
    objects.map(_dump)
    | values.map(_dump)
    | st.text(max_size=200)
    | st.text(alphabet="-: []{}&*!|>'\"\n #abc", max_size=120)
)

SETTINGS = settings(
    max_examples=200,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def _check_result(config_text: str, app_text: str) -> None:
    result = build_layout(
        tenant(),
        [
            UnparsedBranch(
                "config", "master", {"zuul.d/0.yaml": dedent(BASE), "zuul.d/1.yaml": config_text}
            ),
            UnparsedBranch("app", "main", {".zuul.yaml": app_text}),
            UnparsedBranch("app", "stable", {".sluice.yaml": app_text}),
        ],
    )
    for error in result.errors:
        assert isinstance(error, ConfigError)
        assert str(error)
    result.layout.to_json()
    for project in ("app", "config"):
        for branch in ("main", "stable"):
            for pipeline in result.layout.pipelines:
                try:
                    graph = freeze_job_graph(result.layout, project, branch, pipeline, ["src/a"])
                except FreezeError as exc:
                    assert str(exc)
                else:
                    canonical_json(graph)


@SETTINGS
@given(config_text=documents, app_text=documents)
def test_arbitrary_documents_never_crash(config_text: str, app_text: str) -> None:
    _check_result(config_text, app_text)


@SETTINGS
@given(text=documents)
def test_arbitrary_tenant_config_never_crashes(text: str) -> None:
    config = parse_tenant_config(text, "main.yaml", CONNECTIONS)
    for error in config.errors:
        assert isinstance(error, ConfigError) and str(error)
