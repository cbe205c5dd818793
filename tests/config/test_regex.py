from __future__ import annotations

import time

import pytest

from scheduler.config.regex import RegexPolicyError, compile_matcher, matches_any


@pytest.mark.parametrize(
    "pattern",
    [
        "^docs/.*$",
        "stable/.*",
        r"^(docs|releasenotes)/.*\.(rst|txt)$",
        r"^playbooks/.*/.*\.yaml$",
        "a{1,16}b{1,16}c{1,16}.*",
        "master",
        "[a-z]+-[0-9]{1,3}",
    ],
)
def test_ordinary_patterns_are_accepted(pattern: str) -> None:
    compile_matcher(pattern)


@pytest.mark.parametrize(
    ("pattern", "reason"),
    [
        ("(a+)+$", "a repetition inside a repetition is not allowed"),
        ("(a|ab)*c", "a repetition over an alternation is not allowed"),
        ("(.*a){20}", "a repetition inside a repetition is not allowed"),
        (r"(\w)\1", "back-references are not allowed"),
        ("(?=a)b", "look-ahead and look-behind are not allowed"),
        ("(a)?(?(1)b|c)", "conditional groups are not allowed"),
        (r"^.*/.*/.*\.yaml$", "more than 2 unbounded repetitions"),
        ("a{1,100}.*b+", "more than 2 unbounded repetitions"),
        ("a{5000}", "a repetition count over 1000"),
        ("[", "invalid regular expression: unterminated character set at position 0"),
        ("x" * 600, "longer than 512 characters"),
    ],
)
def test_dangerous_patterns_are_refused(pattern: str, reason: str) -> None:
    with pytest.raises(RegexPolicyError) as info:
        compile_matcher(pattern)
    assert str(info.value) == reason


def test_accepted_patterns_stay_fast_on_hostile_input() -> None:
    """The worst the policy lets through, on a 4 KB adversarial path."""
    hostile = "a/" * 2048
    start = time.perf_counter()
    for pattern in (r"^.*/.*\.yaml$", "(a|b)c*d", "[a/]*x", "a{0,1000}/.*x"):
        assert not matches_any((pattern,), hostile)
    assert time.perf_counter() - start < 1.0
