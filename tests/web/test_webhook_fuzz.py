"""Fuzzed webhook deliveries: never a 5xx, and never a stalled connection queue.

Hypothesis makes JSON bodies (random, and real payload shapes with random
values); each is signed and delivered to a real ``sluice web``, which must
answer 2xx or 4xx, and every stored one must either translate into trigger
events or be refused as malformed by the driver: no other exception.

Then the queue: a few hundred signed deliveries of every event type of both
drivers, real shapes mutated with hostile names (spaces, control
characters, ``..``), huge numbers and wrong types, go through a real
``sluice web`` to real workers whose translation calls fake GitHub and
GitLab APIs; a normal pull request opened after them is checked within a
minute, the system goes idle, and what was set aside is listed, with its
reason, by ``sluice deliveries`` and the API.
"""

from __future__ import annotations

import collections
import hashlib
import hmac
import json
import random
import time
from typing import Any

import httpx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.drivers import webhooks
from scheduler.drivers.github import events as github
from scheduler.drivers.gitlab import events as gitlab
from scheduler.wire.events import MalformedEventError
from tests.e2e.system import SluiceSystem
from tests.fixtures.waiting import wait_until
from tests.web.server import start_web, token
from tests.web.test_deliveries import forges

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


# -- a queue no delivery can stall -----------------------------------------------

SHA = "1" * 40
GITHUB_PULL = {
    "number": 1,
    "title": "a change",
    "state": "open",
    "head": {"sha": SHA, "ref": "fix"},
    "base": {"ref": "main"},
    "labels": [{"name": "gate"}],
}
# one real-shaped body of each event type each driver stores
GITHUB_BODIES: dict[str, dict[str, Any]] = {
    "push": {"ref": "refs/heads/main", "before": SHA, "after": "2" * 40},
    "pull_request": {"action": "opened", "number": 1, "pull_request": GITHUB_PULL},
    "issue_comment": {
        "action": "created",
        "issue": {"number": 1, "title": "a change", "pull_request": {}},
        "comment": {"body": "recheck"},
    },
    "pull_request_review": {
        "action": "submitted",
        "review": {"state": "approved", "user": {"login": "ann"}},
        "pull_request": GITHUB_PULL,
    },
    "status": {"sha": SHA, "context": "ci", "state": "success"},
    "check_run": {
        "action": "completed",
        "check_run": {"name": "ci", "pull_requests": [GITHUB_PULL]},
    },
}
GITLAB_MR = {
    "iid": 1,
    "action": "open",
    "title": "a change",
    "state": "opened",
    "source_branch": "fix",
    "target_branch": "main",
    "last_commit": {"id": SHA},
}
GITLAB_BODIES: dict[str, dict[str, Any]] = {
    "Push Hook": {"ref": "refs/heads/main", "before": SHA, "after": "2" * 40},
    "Tag Push Hook": {"ref": "refs/tags/v1", "before": "0" * 40, "after": SHA},
    "Merge Request Hook": {
        "object_kind": "merge_request",
        "user": {"username": "ann"},
        "object_attributes": GITLAB_MR,
        "labels": [{"title": "gate"}],
        "changes": {},
    },
    "Note Hook": {
        "object_kind": "note",
        "user": {"username": "ann"},
        "object_attributes": {"note": "recheck", "noteable_type": "MergeRequest"},
        "merge_request": GITLAB_MR,
    },
}
# what a hostile or broken sender puts where a name, a number or an object belongs
HOSTILE: list[Any] = [
    "org/app x",
    "org/app\x01",
    "org/app\n",
    "../../etc/passwd",
    "org/..",
    "..",
    "org/app?x=1#y",
    "org/%2e%2e",
    "org/" + "a" * 5000,
    "org/app\u202e",
    "",
    10**30,
    -(10**30),
    -1,
    0,
    1.5,
    True,
    None,
    [],
    {},
    [1, "two", None],
    {"number": "x"},
]


def mutated(rng: random.Random, body: dict[str, Any]) -> dict[str, Any]:
    """``body`` with one to three of its values replaced by hostile ones, or removed."""
    body = json.loads(json.dumps(body))
    for _ in range(rng.randint(1, 3)):
        place, key = _a_place(rng, body)
        if rng.random() < 0.2:
            place.pop(key, None)
        else:
            place[key] = rng.choice(HOSTILE)
    return body


def _a_place(rng: random.Random, body: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """A random mapping inside ``body`` (``body`` itself included) and one of its keys."""
    place = body
    while True:
        key = rng.choice(sorted(place)) if place else "x"
        inner = place.get(key)
        if isinstance(inner, list) and inner and isinstance(inner[0], dict):
            inner = inner[0]
        if not isinstance(inner, dict) or not inner or rng.random() < 0.4:
            return place, key
        place = inner


def random_json(rng: random.Random, depth: int = 0) -> Any:
    if depth > 2 or rng.random() < 0.4:
        return rng.choice(HOSTILE)
    if rng.random() < 0.5:
        return [random_json(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return {rng.choice(["ref", "action", "number", "x"]): random_json(rng, depth + 1)}


def hostile_deliveries(count: int, seed: int = 35) -> list[tuple[str, str, dict[str, Any]]]:
    """``count`` (driver, event, body): real shapes mutated, and one in ten random."""
    rng = random.Random(seed)
    kinds = [("github", e, b) for e, b in GITHUB_BODIES.items()]
    kinds += [("gitlab", e, b) for e, b in GITLAB_BODIES.items()]
    found = []
    for n in range(count):
        driver, event, body = kinds[n % len(kinds)]
        where = "repository" if driver == "github" else "project"
        name = "org/app" if driver == "github" else "group/lib"
        shaped = {
            **body,
            where: {"full_name" if driver == "github" else "path_with_namespace": name},
        }
        if n % 10 == 9:
            random_body = random_json(rng)
            shaped = random_body if isinstance(random_body, dict) else {"x": random_body}
        else:
            shaped = mutated(rng, shaped)
        found.append((driver, event, shaped))
    return found


def test_no_delivery_stalls_the_queue(system: SluiceSystem) -> None:
    """300 signed hostile deliveries, then a normal pull request is checked, and all is idle."""
    with forges(system) as sites:
        started = time.monotonic()
        answers = [
            sites.post(driver, event, body) for driver, event, body in hostile_deliveries(300)
        ]
        assert {a["status"] for a in answers} <= {"stored", "ignored", "duplicate"}
        sent = time.monotonic()
        pull = sites.github.open_pull("org/app", "fix", "A normal change")
        wait_until(lambda: "success" in sites.github.statuses_of(pull), 60, "the normal check", 0.3)
        checked = time.monotonic()
        sites.quiet()  # no event queued, nothing deferred, no item left
        print(
            f"300 deliveries sent in {sent - started:.1f}s; the pull request checked "
            f"{checked - sent:.1f}s later; idle {time.monotonic() - checked:.1f}s after"
        )
        rows = sites.rows()
        assert rows and all(r["state"] == "set-aside" and r["reason"] for r in rows)
        by_connection = {
            c: sorted(r["delivery"] for r in rows if r["connection"] == c)
            for c in ("github", "gitlab")
        }
        kinds = collections.Counter(r["reason"].split(":")[0] for r in rows)
        print(f"set aside: {len(rows)} ({', '.join(f'{k} {n}' for k, n in kinds.most_common())})")
        assert by_connection["github"] and by_connection["gitlab"]
        for connection, expected in by_connection.items():
            listed = sites.web.get(f"/api/connection/{connection}/deliveries", auth=token("*"))
            assert sorted(r["delivery"] for r in listed) == expected
        for worker in system.started:  # no hop failed and was retried
            log = worker.log_text()
            assert "forward_connection_events" in log
            assert "Retry in" not in log and "raised unexpected" not in log
