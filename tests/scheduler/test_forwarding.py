"""The event hops against a real ZooKeeper: connection -> tenants -> pipelines."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from scheduler.nudge import task_names
from scheduler.processing import forwarding
from scheduler.stores import parked
from scheduler.zk import locks, paths
from scheduler.zk.client import ZooKeeperClient
from scheduler.zk.event_queue import EventQueue


class Routing:
    def tenants_for_project(self, connection: str, project: str) -> list[str]:
        return {"app": ["one", "two"], "lib": ["two"]}.get(project, [])

    def verdicts(self, tenant: str, event: Mapping[str, Any]) -> dict[str, str]:
        return {"post": "enqueue"} if event.get("type") == "ref-updated" else {}

    def requirements_verdict(self, tenant: str, pipeline: str, event: Mapping[str, Any]) -> str:
        return ""

    def default_branch(self, tenant: str, project: str) -> str:
        return "main"

    def pipelines(self, tenant: str) -> list[str]:
        return ["check", "post"]


Nudges = list[tuple[str, Sequence[Any], str | None]]


def recorder(nudges: Nudges) -> forwarding.Nudge:
    return lambda task, args, queue, label="": nudges.append((task, tuple(args), queue))


def ref_updated(project: str, newrev: str) -> dict[str, Any]:
    return {
        "type": "ref-updated",
        "project": project,
        "branch": "main",
        "ref": "main",
        "oldrev": "1" * 40,
        "newrev": newrev,
    }


def payloads(client: ZooKeeperClient, root: str) -> list[dict[str, Any]]:
    return [event.payload for event in EventQueue(client, root).read()]


def test_events_reach_every_tenant_and_matching_pipeline_in_order(
    client: ZooKeeperClient,
) -> None:
    nudges: Nudges = []
    connection = EventQueue(client, paths.connection_event_queue("local"))
    for n in range(3):
        connection.put(ref_updated("app", f"a{n:039d}"))
    connection.put(ref_updated("lib", "f" * 40))
    connection.put({"type": "ref-updated"})  # no project: logged and dropped

    forwarding.forward_connection_events(client, Routing(), recorder(nudges), "local")
    assert connection.length() == 0
    assert [p["newrev"][-1] for p in payloads(client, paths.tenant_trigger_queue("one"))] == [
        "0",
        "1",
        "2",
    ]
    assert len(payloads(client, paths.tenant_trigger_queue("two"))) == 4
    assert sorted(nudges) == [
        (task_names.PROCESS_TENANT, ("one",), None),
        (task_names.PROCESS_TENANT, ("two",), None),
    ]

    nudges.clear()
    forwarding.process_tenant(client, Routing(), recorder(nudges), "two")
    enqueued = payloads(client, paths.pipeline_trigger_queue("two", "post"))
    assert [(e["change"]["project"], e["change"]["is_branch_update"]) for e in enqueued] == [
        ("app", True),
        ("app", True),
        ("app", True),
        ("lib", True),
    ]
    assert nudges == [(task_names.PROCESS_PIPELINE, ("two", "post"), None)]
    assert EventQueue(client, paths.tenant_trigger_queue("two")).length() == 0


def test_management_events_go_to_their_pipeline(client: ZooKeeperClient) -> None:
    nudges: Nudges = []
    queue = EventQueue(client, paths.tenant_management_queue("one"))
    change = {"connection": "local", "project": "app", "branch": "main", "ref": "f", "commit": "c"}
    queue.put({"type": "enqueue", "pipeline": "check", "change": change, "result_id": "r1"})
    queue.put({"type": "enqueue", "change": change})  # no pipeline: dropped
    forwarding.process_tenant(client, Routing(), recorder(nudges), "one")
    (moved,) = payloads(client, paths.pipeline_management_queue("one", "check"))
    assert moved["result_id"] == "r1"
    assert queue.length() == 0
    assert nudges == [(task_names.PROCESS_PIPELINE, ("one", "check"), None)]


def test_a_busy_hop_leaves_the_events_for_the_holder(client: ZooKeeperClient) -> None:
    nudges: Nudges = []
    connection = EventQueue(client, paths.connection_event_queue("local"))
    connection.put(ref_updated("app", "a" * 40))
    held = locks.try_exclusive(client, paths.connection_lock("local", "events"))
    assert held is not None
    with held:
        forwarding.forward_connection_events(client, Routing(), recorder(nudges), "local")
    assert connection.length() == 1  # untouched: the holder drains it
    # ...and the hop that found the lock busy asked to be run again.
    assert nudges == [(task_names.FORWARD_CONNECTION_EVENTS, ("local",), None)]


def test_a_batch_closes_before_its_transaction_grows_too_large(
    client: ZooKeeperClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 50 tenants holding a project made a batch of 100 events a 1.8 MB
    # transaction: refused by ZooKeeper, retried forever, the queue stuck
    monkeypatch.setattr(forwarding, "BATCH_BYTES", 3000)
    nudges: Nudges = []
    connection = EventQueue(client, paths.connection_event_queue("local"))
    for n in range(12):
        connection.put(ref_updated("app", f"a{n:039d}"))
    with client.counting_requests() as count:
        forwarding.forward_connection_events(client, Routing(), recorder(nudges), "local")
    assert connection.length() == 0
    for tenant in ("one", "two"):
        newrevs = [p["newrev"] for p in payloads(client, paths.tenant_trigger_queue(tenant))]
        assert newrevs == [f"a{n:039d}" for n in range(12)]  # each once, in order
    assert count.by_type()["Transaction"] > 1  # several batches


def test_a_new_head_or_target_branch_takes_old_versions_out_of_every_pipeline(
    client: ZooKeeperClient,
) -> None:
    """A pull request moved (synchronize, base edited): a dequeue of what it no longer is."""
    trigger = EventQueue(client, paths.tenant_trigger_queue("one"))
    pull = {
        "type": "pull_request",
        "connection": "github",
        "project": "app",
        "branch": "stable",
        "ref": "refs/pull/7/head",
        "newrev": "b" * 40,
    }
    trigger.put({**pull, "action": "changed", "change": 7})
    trigger.put({**pull, "action": "comment", "change": 7})  # moves nothing
    forwarding.process_tenant(client, Routing(), recorder([]), "one")
    for pipeline in Routing().pipelines("one"):
        (dequeue,) = payloads(client, paths.pipeline_management_queue("one", pipeline))
        assert dequeue["type"] == "dequeue" and dequeue["current"] == "b" * 40
        assert dequeue["change"]["branch"] == "stable"


class GateRouting(Routing):
    """A gate requiring approval of a change and of every change it depends on."""

    def verdicts(self, tenant: str, event: Mapping[str, Any]) -> dict[str, str]:
        if event.get("action") != "approved":
            return {}
        verdict = self.requirements_verdict(tenant, "gate", event)
        return {"gate": verdict} if verdict else {}

    def requirements_verdict(self, tenant: str, pipeline: str, event: Mapping[str, Any]) -> str:
        if not event.get("approvals"):
            return ""
        ready = all(n.get("approvals") for n in event.get("needs") or ())
        return "enqueue" if ready else "wait"

    def pipelines(self, tenant: str) -> list[str]:
        return ["gate"]


def pull(number: int, action: str, approved: bool, needs: Sequence[int] = ()) -> dict[str, Any]:
    def state(n: int, ok: bool) -> dict[str, Any]:
        ref = f"refs/pull/{n}/head"
        return {"project": "app", "branch": "main", "ref": ref, "approvals": ["ann"] if ok else []}

    return {
        "type": "pull_request",
        "connection": "github",
        **state(number, approved),
        "newrev": f"{number:040d}",
        "action": action,
        "change": number,
        "needs": [{**state(n, False), "connection": "", "commit": f"{n:040d}"} for n in needs],
    }


def enqueued_refs(client: ZooKeeperClient) -> list[str]:
    found = payloads(client, paths.pipeline_trigger_queue("one", "gate"))
    return [e["change"]["ref"].split("/")[2] for e in found]


def test_a_change_approved_before_its_dependency_enters_behind_it(
    client: ZooKeeperClient,
) -> None:
    """Zuul's enqueue of changes behind: B (Depends-On A) waits, then follows A in."""
    trigger = EventQueue(client, paths.tenant_trigger_queue("one"))
    trigger.put(pull(2, "approved", True, needs=[1]))  # B first: A is not approved yet
    forwarding.process_tenant(client, GateRouting(), recorder([]), "one")
    assert enqueued_refs(client) == []
    assert len(client.get_children(paths.tenant_parked_changes("one"))) == 1

    trigger.put(pull(1, "approved", True))  # A approved: A enters, B right behind it
    forwarding.process_tenant(client, GateRouting(), recorder([]), "one")
    assert enqueued_refs(client) == ["1", "2"]
    assert client.get_children(paths.tenant_parked_changes("one")) == []


def test_a_parked_change_follows_what_its_forge_says_last(client: ZooKeeperClient) -> None:
    trigger = EventQueue(client, paths.tenant_trigger_queue("one"))
    trigger.put(pull(2, "approved", True, needs=[1]))
    trigger.put(pull(2, "dismissed", False, needs=[1]))  # B's approval withdrawn
    trigger.put(pull(1, "approved", True))
    forwarding.process_tenant(client, GateRouting(), recorder([]), "one")
    assert enqueued_refs(client) == ["1"]  # B stays out
    assert client.get_children(paths.tenant_parked_changes("one")) == []

    # parked again, then its dependency approved in a comment's enriched state
    trigger.put(pull(4, "approved", True, needs=[3]))
    trigger.put(pull(4, "comment", True, needs=[3]))  # still waiting: stays parked
    forwarding.process_tenant(client, GateRouting(), recorder([]), "one")
    assert len(client.get_children(paths.tenant_parked_changes("one"))) == 1
    approved_dependency = pull(4, "comment", True)
    approved_dependency["needs"] = [{**pull(3, "x", True), "commit": "3" * 40}]
    trigger.put(approved_dependency)  # the forge now says 3 is approved: 4 enters
    forwarding.process_tenant(client, GateRouting(), recorder([]), "one")
    assert enqueued_refs(client) == ["1", "4"]
    assert client.get_children(paths.tenant_parked_changes("one")) == []


def test_a_change_parked_past_the_retention_is_forgotten(client: ZooKeeperClient) -> None:
    trigger = EventQueue(client, paths.tenant_trigger_queue("one"))
    trigger.put(pull(2, "approved", True, needs=[1]))
    forwarding.process_tenant(client, GateRouting(), recorder([]), "one")
    assert parked.prune(client, ["one"]) == []
    later = time.time() + parked.RETENTION + 1
    assert parked.prune(client, ["one", "absent"], now=later) == ["one/github/app:refs/pull/2/head"]
    assert client.get_children(paths.tenant_parked_changes("one")) == []


def test_a_branch_made_or_removed_reconfigures_the_tenant(client: ZooKeeperClient) -> None:
    """As Zuul: the tenant's branches changed (a push of a new or deleted branch)."""
    nudges: Nudges = []
    trigger = EventQueue(client, paths.tenant_trigger_queue("two"))
    local = {"connection": "local"}
    trigger.put({**ref_updated("app", "a" * 40), **local, "oldrev": "0" * 40, "branch": "stable"})
    trigger.put({**ref_updated("app", "0" * 40), **local, "branch": "old", "deleted": True})
    trigger.put({**ref_updated("app", "b" * 40), **local})  # an update: nothing to reconfigure
    forwarding.process_tenant(client, Routing(), recorder(nudges), "two")
    why = [e["why"] for e in payloads(client, paths.tenant_reconfigure_queue("two"))]
    assert why == ["branch stable of app created", "branch old of app deleted"]
    assert (task_names.RECONFIGURE, ("two",), None) in nudges


def test_a_tenant_with_a_long_name_is_nudged_by_its_name(client: ZooKeeperClient) -> None:
    """Its queue's path segment is a digest past 200 encoded characters: the hop nudges
    the tenant it routed to, never a name read back from a path."""
    long_name = "tenant/" + "ü" * 120

    class LongRouting(Routing):
        def tenants_for_project(self, connection: str, project: str) -> list[str]:
            return [long_name]

    nudges: Nudges = []
    EventQueue(client, paths.connection_event_queue("local")).put(ref_updated("app", "a" * 40))
    forwarding.forward_connection_events(client, LongRouting(), recorder(nudges), "local")
    assert nudges == [(task_names.PROCESS_TENANT, (long_name,), None)]
    assert len(payloads(client, paths.tenant_trigger_queue(long_name))) == 1
