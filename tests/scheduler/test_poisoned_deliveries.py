"""The connection hop against a real ZooKeeper: no delivery holds back the ones behind it.

Whatever translating a delivery raises, the delivery is routed, deferred
(its forge was unavailable: tried again after a back-off, a bounded number
of times) or set aside with its reason, in the transaction that
acknowledges it; the deliveries behind it are routed in the same pass.
"""

from __future__ import annotations

import http.client
import time
from collections.abc import Mapping
from typing import Any

import pytest

from scheduler import sweep
from scheduler.drivers import ForgeError
from scheduler.drivers.webhooks import DeliveryRetry, is_transient
from scheduler.processing import forwarding
from scheduler.stores import deliveries
from scheduler.views.deliveries import delivery_rows
from scheduler.wire.events import MalformedEventError, TriggerEvent
from scheduler.zk import paths
from scheduler.zk.client import ZooKeeperClient
from scheduler.zk.event_queue import EventQueue
from tests.scheduler.test_forwarding import Nudges, Routing, payloads, recorder


def webhook(delivery: str, fault: str = "") -> dict[str, Any]:
    body = {"fault": fault, "repository": {"full_name": "app"}}
    return {
        "type": "webhook",
        "driver": "github",
        "event": "push",
        "delivery": delivery,
        "received": 1000.0,
        "body": body,
    }


def unsendable_url() -> ForgeError:
    """What the forge client raises for a URL urllib cannot encode: status 0, not the forge's."""
    try:
        try:
            "/repos/org/app\u2028/pulls/1".encode("latin-1")
        except ValueError as exc:
            raise ForgeError(f"GitHub GET /repos/org/app/pulls/1: {exc}") from None
    except ForgeError as forge_error:
        return forge_error
    raise AssertionError("unreachable")


class Translator:
    """Translates ``push`` deliveries; ``body.fault`` names what to raise instead."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.unavailable = True

    def __call__(self, payload: Mapping[str, Any]) -> list[TriggerEvent]:
        self.calls.append(payload["delivery"])
        fault = payload["body"]["fault"]
        if fault == "bug":
            raise RuntimeError("something no one expected")
        if fault == "malformed":
            raise MalformedEventError("webhook body has no ref")
        if fault == "gone":
            raise ForgeError("GitHub GET /repos/app/pulls/9: 404 Not Found", 404)
        if fault == "url":  # a name with a space, put into a URL unquoted
            raise http.client.InvalidURL("URL can't contain control characters. 'app x'")
        if fault == "unicode":
            raise unsendable_url()
        if fault == "down" and self.unavailable:
            raise ForgeError("GitHub GET /repos/app/pulls/1: 502 Bad Gateway", 502)
        if fault == "timeout" and self.unavailable:
            raise ForgeError("GitHub GET /repos/app/pulls/1: timed out")
        title = "\ud800" if fault == "surrogate" else "ok"  # a forge's answer JSON cannot carry
        return [TriggerEvent("push", "app", branch="main", newrev="a" * 40, extra={"t": title})]


def hop(
    client: ZooKeeperClient, translate: Translator, nudges: Nudges, now: float = 0.0, **retry: Any
) -> Any:
    return forwarding.forward_connection_events(
        client,
        Routing(),
        recorder(nudges),
        "github",
        translate=translate,
        retry=DeliveryRetry(**retry) if retry else None,
        now=time.time() + now,
    )


def routed(client: ZooKeeperClient) -> list[str]:
    return [p["event_id"] for p in payloads(client, paths.tenant_trigger_queue("one"))]


def test_whatever_a_delivery_raises_it_is_set_aside_and_the_rest_are_routed(
    client: ZooKeeperClient,
) -> None:
    queue = EventQueue(client, paths.connection_event_queue("github"))
    faults = ["bug", "", "malformed", "gone", "", "url", "surrogate", "", "unicode"]
    for n, fault in enumerate(faults):
        queue.put(webhook(f"d{n}", fault))
    queue.put({"type": "ref-updated"})  # not a webhook, and no project
    nudges: Nudges = []
    assert hop(client, Translator(), nudges) is None
    assert queue.length() == 0
    assert len(routed(client)) == 3  # d1, d4, d7
    records = {r.delivery: r for r in deliveries.set_aside(client, "github")}
    assert set(records) == {"d0", "d2", "d3", "d5", "d6", "d8"} | {
        r for r in records if r.startswith("event-")
    }
    assert len(records) == 7
    assert records["d0"].reason == "RuntimeError: something no one expected"
    assert records["d2"].reason.startswith("MalformedEventError: webhook body has no ref")
    assert "404" in records["d3"].reason
    assert records["d5"].reason.startswith("InvalidURL") and "app x" in records["d5"].reason
    assert records["d8"].reason.startswith("ForgeError") and "latin-1" in records["d8"].reason
    assert records["d6"].reason.startswith("DecodeError")
    assert (records["d0"].driver, records["d0"].event, records["d0"].received) == (
        "github",
        "push",
        1000.0,
    )
    assert all(r.kept and r.attempts == 0 for r in records.values())
    assert not EventQueue(client, paths.connection_deferred_queue("github")).length()


def test_an_unavailable_forge_defers_with_back_off_then_sets_aside(
    client: ZooKeeperClient,
) -> None:
    queue = EventQueue(client, paths.connection_event_queue("github"))
    deferred = EventQueue(client, paths.connection_deferred_queue("github"))
    queue.put(webhook("ok-1"))
    queue.put(webhook("down", "down"))
    queue.put(webhook("timeout", "timeout"))
    translate = Translator()
    nudges: Nudges = []
    wait = hop(client, translate, nudges, attempts=3, backoff=60.0)
    assert queue.length() == 0 and len(routed(client)) == 1
    # each delivery is tried on its own: one that fails holds back none behind it
    assert translate.calls == ["ok-1", "down", "timeout"]
    assert wait is not None and 55 < wait <= 60
    states = [deliveries.retry_state(e.payload) for e in deferred.read()]
    assert [s.attempts for s in states] == [1, 1]
    rows = delivery_rows(client, "github")  # what sluice deliveries and the API show
    assert [(r["delivery"], r["state"], r["attempts"]) for r in rows] == [
        ("down", "deferred", 1),
        ("timeout", "deferred", 1),
    ]
    assert rows[0]["reason"].startswith("forge unavailable: ForgeError") and rows[0]["received"]
    assert rows[0]["not_before"] == states[0].not_before
    assert "502" in states[0].error and states[1].error.endswith("timed out")

    # not due yet: a pass leaves them alone (and asks for no nudge)
    queue.put(webhook("ok-2"))
    assert hop(client, translate, nudges, attempts=3, backoff=60.0) is None
    assert translate.calls[-1] == "ok-2" and deferred.length() == 2

    # due a minute later: tried again (one call a pass), then set aside
    hop(client, translate, nudges, now=61, attempts=3, backoff=60.0)
    assert deferred.length() == 2 and translate.calls[-2:] == ["down", "timeout"]
    assert hop(client, translate, nudges, now=61, attempts=3, backoff=60.0) is None  # 120 s
    hop(client, translate, nudges, now=182, attempts=3, backoff=60.0)
    assert deferred.length() == 0
    records = {r.delivery: r for r in deliveries.set_aside(client, "github")}
    assert set(records) == {"down", "timeout"}
    assert records["down"].reason.startswith("forge unavailable: ForgeError")
    assert records["down"].attempts == 3
    # what an operator retries is translated afresh (the forge is back)
    translate.unavailable = False
    deliveries.SetAsideStore(client, "github").retry("down")
    assert hop(client, translate, nudges) is None
    assert len(routed(client)) == 3 and deliveries.set_aside(client, "github")[0].delivery == (
        "timeout"
    )


def test_a_deferred_delivery_that_succeeds_later_is_routed_once(client: ZooKeeperClient) -> None:
    queue = EventQueue(client, paths.connection_event_queue("github"))
    queue.put(webhook("down", "down"))
    translate = Translator()
    nudges: Nudges = []
    hop(client, translate, nudges, backoff=0.0)
    translate.unavailable = False
    assert hop(client, translate, nudges, backoff=0.0) is None
    assert hop(client, translate, nudges, backoff=0.0) is None
    assert routed(client) and len(routed(client)) == 1
    assert translate.calls == ["down", "down"]
    assert not EventQueue(client, paths.connection_deferred_queue("github")).length()
    assert not deliveries.set_aside(client, "github")


def test_a_slow_forge_costs_no_more_than_a_batch_of_seconds(
    client: ZooKeeperClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    # each delivery waited for a forge's timeout: a batch of 100 of them held its
    # work for the length of them all, lost whole if the hop was cut short
    monkeypatch.setattr(forwarding, "BATCH_SECONDS", 0.0)
    queue = EventQueue(client, paths.connection_event_queue("github"))
    for n in range(3):
        queue.put(webhook(f"d{n}", "timeout"))
    with client.counting_requests() as count:
        hop(client, Translator(), [])
    assert count.by_type()["Transaction"] >= 3  # each deferral committed on its own
    assert EventQueue(client, paths.connection_deferred_queue("github")).length() == 3


def test_the_sweep_nudges_a_connection_whose_deferred_delivery_is_due(
    client: ZooKeeperClient,
) -> None:
    for connection, wait in (("github", 3600.0), ("gitlab", -1.0)):
        state = deliveries.RetryState(1, time.time() + wait, "502 Bad Gateway")
        deferred = EventQueue(client, paths.connection_deferred_queue(connection))
        deferred.put(deliveries.deferred_payload(webhook("d1"), state))
    nudged: list[str] = []
    assert sweep.renudge_deferred(client, nudged.append) == ["gitlab"]
    assert nudged == ["gitlab"]


def test_what_counts_as_the_forge_unavailable() -> None:
    limited = 'GitHub GET /repos/o/a/pulls/1: 403 {"message": "API rate limit exceeded"}'
    assert is_transient(ForgeError("GitHub GET /repos/o/a/pulls/1: timed out"))
    assert is_transient(ForgeError(limited, 403))
    assert all(is_transient(ForgeError("x", status)) for status in (408, 429, 500, 502, 503))
    assert not any(is_transient(ForgeError("x", status)) for status in (400, 401, 403, 404, 422))
    assert not is_transient(unsendable_url())  # the delivery's fault, not the forge's
    assert not is_transient(RuntimeError("x")) and not is_transient(MalformedEventError("x"))
