from __future__ import annotations

import time
import tracemalloc

import pytest

from scheduler.config.errors import YamlError
from scheduler.config.yamlload import MAX_NODES, MarkedDict, MarkedList, load_yaml


def test_lines_of_keys_and_items() -> None:
    data = load_yaml("- job:\n    name: a\n    run: x.yaml\n- job: {name: b}\n", "zuul.yaml")
    assert isinstance(data, MarkedList)
    assert data.item_lines == [1, 4]
    job = data[0]["job"]
    assert isinstance(job, MarkedDict)
    assert job.key_lines == {"name": 2, "run": 3}


def test_timestamps_stay_strings() -> None:
    assert load_yaml("a: 2026-01-01\n", "f.yaml") == {"a": "2026-01-01"}


def test_merge_keys_may_be_overridden() -> None:
    data = load_yaml("x: &x {a: 1, b: 2}\ny:\n  <<: *x\n  b: 3\n", "f.yaml")
    assert data["y"] == {"a": 1, "b": 3}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a: 1\na: 2\n", "f.yaml:2: duplicate key 'a' (first at line 1)"),
        ("a: &a [*a]\n", "f.yaml:1: an alias refers to a node that contains it"),
        ("[" * 80 + "]" * 80, "f.yaml:1: nesting deeper than 64 levels"),
        ("? [a]\n: 1\n", "f.yaml:1: a mapping key must be a scalar"),
        (
            "---\na\n---\nb\n",
            "f.yaml:3: invalid YAML: expected a single document in the stream, "
            "but found another document",
        ),
        (
            "a: !!python/object:os.system x\n",
            "f.yaml:1: invalid YAML: could not determine a constructor for the tag "
            "'tag:yaml.org,2002:python/object:os.system'",
        ),
    ],
)
def test_refused(text: str, message: str) -> None:
    with pytest.raises(YamlError) as info:
        load_yaml(text, "f.yaml")
    assert str(info.value) == message


def test_billion_laughs_is_refused_quickly() -> None:
    lines = ["a: &a [" + ",".join(['"lol"'] * 9) + "]"]
    previous = "a"
    for name in "bcdefghi":
        lines.append(f"{name}: &{name} [" + ",".join([f"*{previous}"] * 9) + "]")
        previous = name
    start = time.perf_counter()
    tracemalloc.start()
    try:
        with pytest.raises(YamlError) as info:
            load_yaml("\n".join(lines) + "\n", "bomb.yaml")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert time.perf_counter() - start < 0.5
    assert peak < 5_000_000  # bytes: nothing was expanded
    assert f"document expands to more than {MAX_NODES} nodes" in str(info.value)


def test_oversized_text_is_refused() -> None:
    with pytest.raises(YamlError, match="larger than"):
        load_yaml("a: " + "x" * 1_100_000, "big.yaml")
