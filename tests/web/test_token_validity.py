"""Zuul's ``max_validity_time`` and ``skew`` per authenticator, against a real ``sluice web``.

Two authenticators: ``short`` (``max_validity_time: 600``, ``skew: 30``) and
``plain`` (neither). A token ``short`` checks must carry ``iat``, be no
older than 600 s and not made to last longer; ``skew`` is the leeway of
``exp`` and of an ``iat`` in the future. ``plain`` takes a long-lived token
without ``iat``. Neither takes a token without ``exp``. An admin verb with
an empty body tells which: 400 (the token passed, the body did not) or 401.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jwt
import pytest

from scheduler.errors import SettingsError
from scheduler.settings.load import parse_settings
from tests.e2e.system import SluiceSystem
from tests.web.server import WebServer, start_web

SHORT = "short-authenticator-secret-of-32-bytes!"
PLAIN = "plain-authenticator-secret-of-32-bytes!"
CONFIG = f"""
web:
  authenticators:
    - name: short
      algorithm: HS256
      secret: {SHORT}
      max_validity_time: 600
      skew: 30
    - name: plain
      algorithm: HS256
      secret: {PLAIN}
"""
ENQUEUE = "/api/tenant/demo/project/app/enqueue"


@pytest.fixture
def two_authenticators(system: SluiceSystem) -> Iterator[WebServer]:
    with start_web(system, CONFIG) as server:
        yield server


def signed(secret: str, **times: float | None) -> str:
    claims: dict[str, Any] = {"sub": "alice", "zuul": {"admin": ["demo"]}}
    claims.update({k: int(v) for k, v in times.items() if v is not None})
    return jwt.encode(claims, secret, algorithm="HS256")


def answer(web: WebServer, auth: str) -> tuple[int, str]:
    found = web.request("POST", ENQUEUE, {}, auth=auth)
    return found.status, found.body["description"]


def test_max_validity_time_and_skew(two_authenticators: WebServer) -> None:
    web = two_authenticators
    now = time.time()
    accepted = {
        "fresh, lasting exactly 600 s": signed(SHORT, iat=now, exp=now + 600),
        "expired 10 s ago, within the skew": signed(SHORT, iat=now - 300, exp=now - 10),
        "issued 10 s ahead, within the skew": signed(SHORT, iat=now + 10, exp=now + 300),
        "plain: a year, no iat": signed(PLAIN, exp=now + 365 * 86400),
    }
    for name, token in accepted.items():
        status, description = answer(web, token)
        assert (status, "'pipeline' is required" in description) == (400, True), name
    refused = {
        "no iat": (signed(SHORT, exp=now + 60), "iat"),
        "lasting 601 s": (signed(SHORT, iat=now, exp=now + 601), "lasts longer than 600 s"),
        "issued 620 s ago, exp within the skew": (
            signed(SHORT, iat=now - 620, exp=now - 20),
            "issued more than 600 s ago",
        ),
        "expired beyond the skew": (signed(SHORT, iat=now - 100, exp=now - 40), "expired"),
        "issued 120 s ahead": (signed(SHORT, iat=now + 120, exp=now + 300), "not yet valid"),
        "short: no exp": (signed(SHORT, iat=now), "exp"),
        "plain: no exp": (signed(PLAIN), "exp"),
        "plain: expired": (signed(PLAIN, exp=now - 5), "expired"),
        "iat not a number": (jwt.encode({"iat": "soon", "exp": now + 60}, SHORT), "iat"),
    }
    for name, (token, reason) in refused.items():
        status, description = answer(web, token)
        assert status == 401 and reason in description, (name, description)


def test_the_settings_are_checked(tmp_path: Path) -> None:
    base = "web:\n  authenticators:\n    - {name: a, algorithm: HS256, secret: s, %s}\n"
    for option, message in (
        ("max_validity_time: -1", "max_validity_time"),
        ("skew: -5", "skew"),
        ("skew: 1.5", "skew"),
        ("max_validity_time: soon", "max_validity_time"),
    ):
        with pytest.raises(SettingsError, match=message):
            parse_settings(base % option, "sluice.yaml", tmp_path)
    settings = parse_settings(base % "max_validity_time: 90.5, skew: 3", "sluice.yaml", tmp_path)
    (found,) = settings.web.authenticators
    assert (found.max_validity_time, found.skew) == (90.5, 3)
