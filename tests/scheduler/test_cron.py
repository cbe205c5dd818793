"""Zuul's timer specs: five cron fields, optional seconds and jitter."""

from __future__ import annotations

import calendar

import pytest

from scheduler.drivers.timer import CronError, CronSpec, jitter_of


def at(text: str) -> float:
    """``YEAR MONTH DAY HOUR MINUTE SECOND`` in UTC, as epoch seconds."""
    year, month, day, hour, minute, second = (int(x) for x in text.split())
    return float(calendar.timegm((year, month, day, hour, minute, second, 0, 0, 0)))


def test_fields_and_matching() -> None:
    nightly = CronSpec.parse("0 3 * * *")
    assert nightly.matches(at("2026 11 25 3 0 0"))
    assert not nightly.matches(at("2026 11 25 3 0 1"))  # seconds default to 0
    assert not nightly.matches(at("2026 11 25 4 0 0"))
    every = CronSpec.parse("*/10 * * * * 30")
    assert every.matches(at("2026 11 25 12 20 30")) and not every.matches(at("2026 11 25 12 21 30"))
    weekdays = CronSpec.parse("0 9 * * 1-5")
    assert weekdays.matches(at("2026 11 25 9 0 0"))  # a Wednesday
    assert not weekdays.matches(at("2026 11 29 9 0 0"))  # a Sunday
    lists = CronSpec.parse("5,35 * * * *")
    assert lists.matches(at("2026 1 1 0 35 0")) and not lists.matches(at("2026 1 1 0 36 0"))


def test_latest_due_time_in_a_window() -> None:
    spec = CronSpec.parse("* * * * * */15")
    now = at("2026 11 25 12 0 40")
    assert spec.latest(now - 30, now) == at("2026 11 25 12 0 30")
    assert spec.latest(at("2026 11 25 12 0 30"), now) is None  # already fired
    assert CronSpec.parse("0 3 * * *").latest(now - 3600, now) is None


def test_jitter_is_stable_and_bounded() -> None:
    spec = CronSpec.parse("0 * * * * 0 60")
    assert spec.jitter == 60
    delay = jitter_of("t/periodic/0 * * * * 0 60", 60)
    assert 0 <= delay <= 60 and delay == jitter_of("t/periodic/0 * * * * 0 60", 60)
    hour = at("2026 11 25 12 0 0")
    assert spec.latest(hour - 1, hour + delay, delay) == hour + delay


@pytest.mark.parametrize(
    "text", ["", "* * * *", "61 * * * *", "* 24 * * *", "a * * * *", "*/0 * * * *", "* * * * * * x"]
)
def test_bad_specs_are_errors(text: str) -> None:
    with pytest.raises(CronError):
        CronSpec.parse(text)
