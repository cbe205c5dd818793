"""GitLab webhook bodies as trigger events (Zuul's GitLab driver's event names).

``Push Hook`` and ``Tag Push Hook`` become ``gl_push`` (a ref moved);
``Merge Request Hook`` becomes ``gl_merge_request`` with its ``action``:
``opened`` (open, reopen), ``merged``, ``closed``, ``approved`` and
``unapproved`` (GitLab's ``approval``/``unapproval`` too), and for an
``update``: ``changed`` only when new commits were pushed (GitLab then sends
``object_attributes.oldrev``), else ``labeled``/``unlabeled`` with the
``label`` when the labels changed, else ``edited`` (a title or description).
``Note Hook`` on a merge request becomes ``gl_merge_request`` with action
``comment``; a note written by the connection's own user (a report) is
dropped before anything is read. The change of a merge request is
``refs/merge-requests/<iid>/head`` at its last commit, targeting the target
branch. A project path GitLab could not have (a space, a control
character...) makes the body malformed.

With the connection's API (:func:`enrich`), a merge request's event carries
its current state, read once: the merge request (1 call), its approval state
(1), its commits at that head (once a process), the open merge requests only
when it has commits another could have as its head; a merged one's event
reads nothing (its state is final).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from scheduler.drivers import depends, field
from scheduler.wire.events import MalformedEventError, TriggerEvent

STORED = frozenset({"Push Hook", "Tag Push Hook", "Merge Request Hook", "Note Hook"})
ZERO = "0" * 40
HEADS = "refs/heads/"
ACTIONS = {
    "open": "opened",
    "merge": "merged",
    "reopen": "opened",
    "close": "closed",
    "approval": "approved",
    "unapproval": "unapproved",
}
# a GitLab project path: namespaces and a name, each of letters, digits, "_", "-", "."
# and not starting with "-" or "."
PROJECT_PATH = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*(?:/[A-Za-z0-9_][A-Za-z0-9_.-]*)+")


def _project(body: Mapping[str, Any]) -> str:
    name = field(body, "project", "path_with_namespace")
    if not isinstance(name, str) or not PROJECT_PATH.fullmatch(name):
        raise MalformedEventError(f"no GitLab project path: {name!r}"[:200])
    return name


def _merge_request(body: Mapping[str, Any], mr: Mapping[str, Any], action: str) -> TriggerEvent:
    iid = int(field(mr, "iid"))
    sha = str((mr.get("last_commit") or {}).get("id") or "")
    labels = body.get("labels") or mr.get("labels") or []
    return TriggerEvent(
        type="gl_merge_request",
        project=_project(body),
        branch=str(field(mr, "target_branch")),
        ref=f"refs/merge-requests/{iid}/head",
        newrev=sha,
        extra={
            "change": iid,
            "patchset": sha,
            "action": action,
            "title": str(mr.get("title") or ""),
            "labels": sorted(str(label.get("title", "")) for label in labels),
        },
    )


def _labeled(body: Mapping[str, Any], mr: Mapping[str, Any], change: Any) -> TriggerEvent:
    """An update that changed labels: ``labeled`` with the label(s) added."""
    before = {str(x.get("title", "")) for x in (change or {}).get("previous") or []}
    after = {str(x.get("title", "")) for x in (change or {}).get("current") or []}
    found = _merge_request(body, mr, "labeled" if after - before else "unlabeled")
    added = sorted(after - before) or sorted(before - after)
    return replace(found, extra={**found.extra, "label": added[0] if added else ""})


DEPENDS_ON = depends.url_pattern(r"(?P<project>.+?)/-/merge_requests/(?P<number>\d+)")


def _state(api: Any, project: str, iid: int, mr: Mapping[str, Any]) -> dict[str, Any]:
    approvals = api.approvals(project, iid)
    return {
        "open": mr.get("state") == "opened",
        "merged": mr.get("state") == "merged",
        "labels": sorted(str(label) for label in mr.get("labels") or []),
        "approved": approvals.approved,
        "approvals": list(approvals.approvers),
    }


def _dependency(api: Any, project: str, iid: int, mr: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "connection": "",
        "project": project,
        "branch": str(mr.get("target_branch") or ""),
        "ref": f"refs/merge-requests/{iid}/head",
        "commit": str(mr.get("sha") or ""),
        **_state(api, project, iid, mr),
    }


def parents_of(api: Any, project: str, iid: int, mr: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Open merge requests whose head is among this one's own commits (git parents)."""
    return _parents(api, project, iid, mr, api.commits(project, iid, str(mr.get("sha") or "")))


def _parents(
    api: Any, project: str, iid: int, mr: Mapping[str, Any], commits: list[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    ids = {str(c.get("id") or "") for c in commits}
    if not ids - {str(mr.get("sha") or "")}:
        return []  # its only commit is its own head: no other can be its parent
    others = (
        (int(field(o, "iid")), str(o.get("sha") or ""), o) for o in api.open_merge_requests(project)
    )
    return depends.parents(iid, ids, others, lambda n, o: _dependency(api, project, n, o))


def needs_of(api: Any, project: str, iid: int, description: str) -> list[dict[str, Any]]:
    """The unmerged merge requests one depends on (:mod:`scheduler.drivers.depends`)."""

    def fetch(dep_project: str, dep_iid: int) -> depends.Found:
        if not PROJECT_PATH.fullmatch(dep_project):
            raise MalformedEventError(f"Depends-On names {dep_project!r}, no GitLab project")
        mr = api.merge_request(dep_project, dep_iid)
        change = _dependency(api, dep_project, dep_iid, mr)
        return depends.Found(mr.get("state") == "merged", str(mr.get("description") or ""), change)

    return depends.needs_of(DEPENDS_ON, fetch, project, iid, description)


def enrich(trigger: TriggerEvent, api: Any) -> TriggerEvent:
    """Add the merge request's current state (``open``, ``merged``, labels, approvals)."""
    if trigger.type != "gl_merge_request":
        return trigger
    if trigger.extra.get("action") == "merged":  # final: nothing to read
        return replace(trigger, extra={**trigger.extra, "open": False, "merged": True})
    iid = int(trigger.extra["change"])
    mr = api.merge_request(trigger.project, iid)
    sha = str(mr.get("sha") or trigger.newrev)
    extra = {**trigger.extra, "patchset": sha, **_state(api, trigger.project, iid, mr)}
    if extra["open"]:
        commits = api.commits(trigger.project, iid, sha)
        messages = [str(c.get("message") or "") for c in commits]
        text = "\n".join([str(mr.get("description") or ""), *messages])
        needs = depends.combined(
            _parents(api, trigger.project, iid, mr, commits),
            needs_of(api, trigger.project, iid, text),
        )
        if needs:
            extra["needs"] = needs
    return TriggerEvent(
        type=trigger.type,
        project=trigger.project,
        branch=str(mr.get("target_branch") or trigger.branch),
        ref=trigger.ref,
        newrev=sha,
        extra=extra,
    )


def translate(
    event: str,
    body: Mapping[str, Any],
    api: Any = None,
    wanted: Callable[[TriggerEvent], bool] | None = None,
) -> list[TriggerEvent]:
    """The trigger events of a hook, each with its merge request's state (with ``api``).

    Nothing is read for our own notes, nor (with ``wanted``: whether some
    pipeline's trigger could match an event, before any read) for a note no
    trigger asks for; every other merge request event is read and routed.
    """
    found = _translate(event, body)
    if api is None:
        return found
    author = _author(body) if event == "Note Hook" else ""
    if found and author and author == api.user():
        return []  # our own report
    if wanted is not None:
        found = [t for t in found if t.extra.get("action") != "comment" or wanted(t)]
    return [enrich(t, api) for t in found]


def _author(body: Mapping[str, Any]) -> str:
    who = body.get("user")
    return str(who.get("username") or "") if isinstance(who, Mapping) else ""


def _merge_request_hook(body: Mapping[str, Any]) -> TriggerEvent:
    """An ``update`` is ``changed`` only with new commits (``oldrev``)."""
    mr = field(body, "object_attributes")
    action = str(mr.get("action") or "")
    if action != "update":
        return _merge_request(body, mr, ACTIONS.get(action, action))
    changes = body.get("changes") or {}
    if mr.get("oldrev"):
        return _merge_request(body, mr, "changed")
    if isinstance(changes, Mapping) and "labels" in changes:
        return _labeled(body, mr, changes["labels"])
    return _merge_request(body, mr, "edited")


def _translate(event: str, body: Mapping[str, Any]) -> list[TriggerEvent]:
    if event in ("Push Hook", "Tag Push Hook"):
        ref = str(field(body, "ref"))
        after = str(body.get("after") or ZERO)
        return [
            TriggerEvent(
                type="gl_push",
                project=_project(body),
                branch=ref[len(HEADS) :] if ref.startswith(HEADS) else "",
                ref=ref,
                oldrev=str(body.get("before") or ZERO),
                newrev=after,
                deleted=after == ZERO,
            )
        ]
    if event == "Merge Request Hook":
        return [_merge_request_hook(body)]
    if event == "Note Hook":
        if "merge_request" not in body:
            return []
        event_ = _merge_request(body, field(body, "merge_request"), "comment")
        note = str(field(body, "object_attributes", "note"))
        return [TriggerEvent(**{**event_.__dict__, "extra": {**event_.extra, "comment": note}})]
    return []
