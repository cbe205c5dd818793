"""Regular expressions from configuration, under a restricted policy.

Branch and file matchers are Python regular expressions applied with
``re.match`` (anchored at the start, as Zuul does). Python's engine
backtracks and cannot be interrupted, so a hostile pattern such as
``(a+)+$`` could hang a scheduler on a long file name. Instead of running
patterns under a timeout, Sluice refuses, at parse time, the constructs
that make backtracking blow up; what remains runs in time polynomial in
the input with a small degree. The policy (checked on the parsed pattern):

* at most :data:`MAX_PATTERN` characters;
* no back-references, look-ahead/look-behind or conditional groups;
* no repetition (``*``, ``+``, ``{m,n}`` with n > 1) inside another
  repetition, and none over an alternation (``(a|ab)*``);
* at most :data:`MAX_UNBOUNDED` unbounded (or over :data:`LARGE_REPEAT`)
  repetitions in one pattern and no explicit count over :data:`MAX_COUNT`.

Together these keep matching at most quadratic in the input: measured
here, the worst accepted pattern takes ~6 ms on a 4 KB path, where
``^.*/.*/.*[.]yaml$`` (three unbounded repetitions, refused) takes ~10 s.

A refused pattern is a configuration error that names the rule it broke.

A job's ``failure-output`` patterns are searched for anywhere in a line of
the job's output (``re.search``, as Zuul does), which puts one more
repetition in front of every pattern. They pass the same policy and, in
addition, hold at most :data:`MAX_LINE_REPEATS` repetition (``*``, ``+``,
``{m,n}`` with n > 1, bounded or not) between them all
(:func:`compile_line_matcher`); the executor searches only the first
``MATCHED_LINE`` characters of a line (``workers/executor/failureoutput.py``).
Measured here, the worst accepted pattern (``\\w*\\d``) takes ~60 ms on a
4 KiB line; ``a.*a.*b`` (two repetitions, refused) takes ~9 s.
"""

from __future__ import annotations

import importlib
import re
from functools import lru_cache
from typing import Any

MAX_PATTERN = 512
MAX_UNBOUNDED = 2
# A repetition allowing more than this many rounds counts as unbounded.
LARGE_REPEAT = 16
MAX_COUNT = 1000

_parser: Any = importlib.import_module("re._parser")
_c: Any = importlib.import_module("re._constants")

_REPEATS = {_c.MAX_REPEAT, _c.MIN_REPEAT, getattr(_c, "POSSESSIVE_REPEAT", _c.MAX_REPEAT)}
_ATOMIC = getattr(_c, "ATOMIC_GROUP", object())
_FORBIDDEN = {
    _c.GROUPREF: "back-references are not allowed",
    _c.GROUPREF_EXISTS: "conditional groups are not allowed",
    _c.ASSERT: "look-ahead and look-behind are not allowed",
    _c.ASSERT_NOT: "look-ahead and look-behind are not allowed",
}


class RegexPolicyError(ValueError):
    """A pattern is invalid or breaks the policy; the message says why."""


class _Walker:
    def __init__(self) -> None:
        self.unbounded = 0

    def walk(self, items: Any, in_repeat: bool) -> None:
        for op, arg in items:
            self.visit(op, arg, in_repeat)

    def visit(self, op: Any, arg: Any, in_repeat: bool) -> None:
        if op in _FORBIDDEN:
            raise RegexPolicyError(_FORBIDDEN[op])
        if op in _REPEATS:
            self.repeat(arg, in_repeat)
        elif op == _c.SUBPATTERN:
            self.walk(arg[-1], in_repeat)
        elif op == _c.BRANCH:
            if in_repeat:
                raise RegexPolicyError("a repetition over an alternation is not allowed")
            for branch in arg[1]:
                self.walk(branch, in_repeat)
        elif op == _ATOMIC:
            self.walk(arg, in_repeat)

    def repeat(self, arg: Any, in_repeat: bool) -> None:
        low, high, body = arg
        many = high == _c.MAXREPEAT or high > 1
        if high != _c.MAXREPEAT and max(low, high) > MAX_COUNT:
            raise RegexPolicyError(f"a repetition count over {MAX_COUNT}")
        if high > LARGE_REPEAT:
            self.unbounded += 1
            if self.unbounded > MAX_UNBOUNDED:
                raise RegexPolicyError(f"more than {MAX_UNBOUNDED} unbounded repetitions")
        if many and in_repeat:
            raise RegexPolicyError("a repetition inside a repetition is not allowed")
        self.walk(body, in_repeat or many)


@lru_cache(maxsize=4096)
def compile_matcher(pattern: str) -> re.Pattern[str]:
    """Check ``pattern`` against the policy and compile it.

    Raises :class:`RegexPolicyError` with a short reason.
    """
    if len(pattern) > MAX_PATTERN:
        raise RegexPolicyError(f"longer than {MAX_PATTERN} characters")
    try:
        parsed = _parser.parse(pattern, 0)
        compiled = re.compile(pattern)
    except (re.error, RecursionError, OverflowError) as exc:
        raise RegexPolicyError(f"invalid regular expression: {exc}") from None
    _Walker().walk(parsed, False)
    return compiled


# repetitions a failure-output pattern may hold (re.search adds one in front)
MAX_LINE_REPEATS = 1


def _repeats(items: Any) -> int:
    """How many repetitions of more than one round ``items`` holds, at any depth."""
    found = 0
    for op, arg in items:
        if op in _REPEATS:
            _low, high, body = arg
            found += int(high == _c.MAXREPEAT or high > 1) + _repeats(body)
        elif op == _c.SUBPATTERN:
            found += _repeats(arg[-1])
        elif op == _c.BRANCH:
            found += sum(_repeats(branch) for branch in arg[1])
        elif op == _ATOMIC:
            found += _repeats(arg)
    return found


@lru_cache(maxsize=1024)
def compile_line_matcher(pattern: str) -> re.Pattern[str]:
    """:func:`compile_matcher`, and at most :data:`MAX_LINE_REPEATS` repetition.

    For patterns searched anywhere in a line (a job's ``failure-output``).
    """
    compiled = compile_matcher(pattern)
    if _repeats(_parser.parse(pattern, 0)) > MAX_LINE_REPEATS:
        raise RegexPolicyError(
            f"a failure-output pattern may hold at most {MAX_LINE_REPEATS} repetition "
            "(*, +, {m,n}); it is searched anywhere in a line"
        )
    return compiled


def matches_any(patterns: tuple[str, ...], value: str) -> bool:
    """Whether any of the (already validated) patterns matches ``value``."""
    return any(compile_matcher(p).match(value) is not None for p in patterns)
