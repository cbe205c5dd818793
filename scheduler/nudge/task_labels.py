"""How a Sluice task reads in Flower and in logs: what it is about, in words.

A task's arguments are identifiers (a tenant, a request uuid): enough for a
worker, meaningless to an operator. Every sender therefore passes a label
as the message's ``argsrepr`` (what Flower shows as the task's arguments),
built here from what the sender knows: tenant, pipeline, project, change,
job and attempt for a build; merge kind, project and change for a merge.
Labels carry names only, never parameters or secrets (those stay in
ZooKeeper). The same words describe a task's result
(:func:`outcome_label`), so the arguments and result columns of Flower
read as one sentence.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from scheduler.nudge import task_names
from scheduler.stores.job_requests import JobRequest


def _words(pairs: Sequence[tuple[str, Any]]) -> str:
    return " ".join(f"{key}={value}" for key, value in pairs if value not in (None, ""))


def request_label(request: JobRequest) -> str:
    """A build or merge request: ``tenant=... pipeline=... project=... change=... job=...``."""
    info: Mapping[str, Any] = request.info
    kind = info.get("kind")
    pairs: list[tuple[str, Any]] = [
        ("tenant", request.tenant),
        ("pipeline", request.pipeline),
        ("project", info.get("project")),
        ("change", info.get("change")),
    ]
    if kind:  # a merger request: merge, cat, push, branches, ...
        pairs.insert(0, ("merge", kind))
    else:
        pairs += [("job", request.job_name), ("attempt", info.get("attempt"))]
        pairs.append(("zone", info.get("zone")))
    pairs.append(("request", request.uuid))
    return _words(pairs)


def label(name: str, args: Sequence[Any]) -> str:
    """A label from a task's name and arguments alone (when no request is at hand)."""
    values = [str(a) for a in args if a is not None]
    if name == task_names.PROCESS_PIPELINE and len(values) == 2:
        return _words([("tenant", values[0]), ("pipeline", values[1])])
    if name in (task_names.PROCESS_TENANT, task_names.RECONFIGURE) and len(values) == 1:
        return _words([("tenant", values[0])])
    if name == task_names.FORWARD_CONNECTION_EVENTS and len(values) == 1:
        return _words([("connection", values[0])])
    if name in (task_names.IMAGE_BUILD, task_names.LAUNCH) and len(values) == 1:
        return _words([(_ONE_ARGUMENT[name], values[0])])
    if name in (task_names.MERGE, task_names.BUILD) and values:
        return _words([("request", values[0]), ("zone", values[1] if len(values) > 1 else "")])
    return " ".join(values)


class LabelError(ValueError):
    """A label does not name the arguments its task needs."""


# Tasks whose one argument a label names, by the word it is named with.
_ONE_ARGUMENT = {
    task_names.PROCESS_TENANT: "tenant",
    task_names.RECONFIGURE: "tenant",
    task_names.FORWARD_CONNECTION_EVENTS: "connection",
    task_names.MERGE: "request",
    task_names.IMAGE_BUILD: "image",
    task_names.LAUNCH: "node_request",
}


def arguments(name: str, label: str) -> tuple[list[Any], dict[str, Any]]:
    """The arguments a label names (the inverse of :func:`label` and :func:`request_label`).

    A label keeps every identifier its task needs, so a task known only by
    its label (as Flower knows a sent task) can be sent again.
    """
    words = dict(w.split("=", 1) for w in label.split() if "=" in w)

    def need(key: str) -> str:
        if not words.get(key):
            raise LabelError(f"{name}: the label {label!r} names no {key}")
        return words[key]

    if name == task_names.PROCESS_PIPELINE:
        return [need("tenant"), need("pipeline")], {}
    if name in _ONE_ARGUMENT:
        return [need(_ONE_ARGUMENT[name])], {}
    if name == task_names.BUILD:
        zone = words.get("zone")
        return [need("request")], ({"zone": zone} if zone else {})
    if name in (task_names.SWEEP, task_names.ROUNDTRIP):
        return [], {}
    raise LabelError(f"{name}: not a task Sluice can send again")


def outcome_label(outcome: str, about: str, result: str = "") -> str:
    """A task's result in the words of its label: ``completed SUCCESS: job=unit ...``."""
    head = f"{outcome} {result}".strip()
    return f"{head}: {about}" if about else head
