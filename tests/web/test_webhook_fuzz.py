"""Fuzzed webhook deliveries: random bodies for every event type never make a 5xx.

Hypothesis makes JSON bodies (random, and real payload shapes with random
values); each is signed and delivered to a real ``sluice web``, which must
answer 2xx or 4xx, and every stored one must either translate into trigger
events or be refused as malformed by the driver: no other exception.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any

import httpx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.drivers import webhooks
from scheduler.drivers.github import events as github
from scheduler.drivers.gitlab import events as gitlab
from scheduler.wire.events import MalformedEventError
from tests.e2e.system import SluiceSystem
from tests.web.server import start_web

SECRET = "fuzz-secret"
CONNECTIONS = f"""
  github:
    driver: github
    baseurl: repos
    webhook_token: {SECRET}
  gitlab:
    driver: gitlab
    baseurl: repos
    webhook_token: {SECRET}
"""

scalars = st.none() | st.booleans() | st.integers() | st.text(max_size=20)
json_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=5)
    ),
    max_leaves=20,
)
# real shapes with random values, so the drivers' deeper paths are reached
shaped = st.fixed_dictionaries(
    {
        "action": scalars,
        "ref": scalars,
        "before": scalars,
        "after": scalars,
        "repository": st.fixed_dictionaries({"full_name": scalars}),
        "project": st.fixed_dictionaries({"path_with_namespace": scalars}),
        "pull_request": st.fixed_dictionaries(
            {
                "number": scalars,
                "head": st.fixed_dictionaries({"sha": scalars}),
                "base": json_values,
            }
        ),
        "object_attributes": st.fixed_dictionaries(
            {"iid": scalars, "action": scalars, "target_branch": scalars, "note": scalars}
        ),
        "issue": json_values,
        "comment": json_values,
        "review": json_values,
        "label": json_values,
        "changes": json_values,
        "merge_request": json_values,
    }
)
bodies = st.one_of(st.dictionaries(st.text(max_size=12), json_values, max_size=6), shaped)
EVENTS = [("github", e) for e in sorted(github.STORED)] + [
    ("gitlab", e) for e in sorted(gitlab.STORED)
]


def translate_or_refuse(driver: str, event: str, body: dict[str, Any]) -> None:
    payload = {"type": "webhook", "driver": driver, "event": event, "body": body}
    try:
        for trigger in webhooks.translate(payload):
            trigger.to_dict()
            trigger.change()
    except MalformedEventError:
        pass  # refused with a message: the hop logs and drops it


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(EVENTS), bodies)
def test_drivers_translate_or_refuse_any_body(event: tuple[str, str], body: dict[str, Any]) -> None:
    translate_or_refuse(*event, body)


def test_fuzzed_deliveries_are_never_a_server_error(system: SluiceSystem) -> None:
    text = system.config.read_text()
    system.config.write_text(text.replace("connections:\n", "connections:\n" + CONNECTIONS))
    with start_web(system, "") as web, httpx.Client(base_url=web.url, timeout=30) as http:
        statuses: list[int] = []

        @settings(
            max_examples=120,
            deadline=None,
            suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
        )
        @given(st.sampled_from(EVENTS), bodies, st.integers(0, 2), st.uuids())
        def deliver(
            event: tuple[str, str], body: dict[str, Any], damage: int, delivery: Any
        ) -> None:
            driver, name = event
            raw = json.dumps(body).encode()
            if damage == 1:
                raw = raw[: len(raw) // 2]  # truncated
            headers = {"Content-Type": "application/json"}
            if driver == "github":
                digest = hmac.new(SECRET.encode(), raw, hashlib.sha256).hexdigest()
                headers |= {
                    "X-GitHub-Event": name,
                    "X-GitHub-Delivery": str(delivery),
                    "X-Hub-Signature-256": f"sha256={digest}",
                }
            else:
                headers |= {
                    "X-Gitlab-Event": name,
                    "X-Gitlab-Event-UUID": str(delivery),
                    "X-Gitlab-Token": SECRET,
                }
            if damage == 2:
                headers.pop(next(iter(k for k in headers if "Delivery" in k or "UUID" in k)))
            answer = http.post(f"/api/connection/{driver}/payload", content=raw, headers=headers)
            statuses.append(answer.status_code)
            assert answer.status_code < 500, (answer.status_code, answer.text)
            assert answer.headers["content-type"].startswith("application/json")

        deliver()
        assert http.get("/api/info").status_code == 200  # the process is up
        assert {200, 400} <= set(statuses)
