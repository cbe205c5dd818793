"""GitHub webhook bodies as trigger events (Zuul's GitHub driver's event names).

``push`` becomes ``push`` (a branch or tag moved, with ``oldrev``/``newrev``
as the git driver's ``ref-updated``); ``pull_request`` becomes
``pull_request`` with its ``action`` (opened, changed for synchronize,
closed, reopened, labeled, unlabeled, edited); ``issue_comment`` on a pull
request becomes ``pull_request`` with action ``comment`` and the comment;
``pull_request_review`` becomes ``pull_request_review`` with the review's
state. The change of a pull request is its head: ``refs/pull/<n>/head`` at
the head sha, targeting the base branch.

A body whose repository is no name GitHub could give (a space, a control
character, ``..``) or whose commit is not a sha is refused
(:class:`MalformedEventError`) before any call to the API.

Enriching an event of a pull request that depends on nothing costs three
API calls: the pull request, its head's statuses and its reviews; its
commits (their shas find git parents, their messages ``Depends-On`` lines)
are read once a process for a given head, and the open pull requests (the
git parents' candidates) only when it has commits besides its head.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from scheduler.drivers import depends, field
from scheduler.drivers.github.api import is_repository
from scheduler.wire.events import MalformedEventError, TriggerEvent

STORED = frozenset(
    {"push", "pull_request", "issue_comment", "pull_request_review", "status", "check_run"}
)
# (TRANSLATE, below, has a function for each)
ZERO = "0" * 40
HEADS = "refs/heads/"
# GitHub's action names, as Zuul's trigger filters spell them
ACTIONS = {"synchronize": "changed"}


SHA = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")


def _project(body: Mapping[str, Any]) -> str:
    name = field(body, "repository", "full_name")
    if not isinstance(name, str) or not is_repository(name):
        raise MalformedEventError(f"repository.full_name {str(name)[:100]!r} is no GitHub name")
    return name


def _sha(value: Any, what: str, *, empty: bool = False) -> str:
    """A commit sha of a body (``empty``: "" is allowed too)."""
    sha = str(value)
    if (empty and not sha) or SHA.fullmatch(sha):
        return sha
    raise MalformedEventError(f"{what} {sha[:80]!r} is not a commit sha")


PULL_EVENTS = ("pull_request", "pull_request_review", "status", "check_run")


def _pull(
    body: Mapping[str, Any], pull: Mapping[str, Any], kind: str = "pull_request", **extra: Any
) -> TriggerEvent:
    number = int(field(pull, "number"))
    sha = _sha(field(pull, "head", "sha"), "head.sha", empty=True)
    return TriggerEvent(
        type=kind,
        project=_project(body),
        branch=str(field(pull, "base", "ref")),
        ref=f"refs/pull/{number}/head",
        newrev=sha,
        extra={
            "change": number,
            "patchset": sha,
            "title": str(pull.get("title") or ""),
            "labels": sorted(str(label.get("name", "")) for label in pull.get("labels") or []),
            "merged": bool(pull.get("merged")),
            **extra,
        },
    )


def _state(pull: Mapping[str, Any], reviews: list[Mapping[str, Any]]) -> dict[str, Any]:
    """What pipeline requirements look at: open, merged, draft, mergeable, labels, approvals."""
    latest: dict[str, str] = {}
    for review in reviews:
        user = str((review.get("user") or {}).get("login", ""))
        state = str(review.get("state", "")).lower()
        if state in ("approved", "changes_requested", "dismissed"):
            latest[user] = state
    return {
        "open": pull.get("state") == "open",
        "merged": bool(pull.get("merged")),
        "draft": bool(pull.get("draft")),
        "mergeable": pull.get("mergeable") is not False,
        "labels": sorted(str(label.get("name", "")) for label in pull.get("labels") or []),
        "approvals": sorted(u for u, state in latest.items() if state == "approved"),
    }


def enrich(trigger: TriggerEvent, api: Any) -> TriggerEvent:
    """Add the pull request's current state from the API (event processing, seed 003).

    ``open``, ``merged``, ``draft``, ``mergeable``, the current ``labels``,
    the head (``newrev``, which a comment event lacks) and ``approvals``:
    the users whose latest review approves. Pipeline ``require:`` filters
    are checked against these.
    """
    if trigger.type not in PULL_EVENTS or trigger.extra.get("action") == "closed":
        return trigger  # (closed: final, its body says whether it was merged)
    number = int(trigger.extra["change"])
    pull = api.pull(trigger.project, number)
    sha = str(field(pull, "head", "sha"))
    commits = api.pull_commits(trigger.project, number, sha)
    # a parent's head is one of this pull request's commits, other than its own head
    others = api.open_pulls(trigger.project) if len(commits) > 1 else []
    extra = {
        **trigger.extra,
        "patchset": sha,
        "statuses": api.statuses(trigger.project, sha),
        **_state(pull, api.reviews(trigger.project, number)),
    }
    text = "\n".join([str(pull.get("body") or ""), *(message for _, message in commits)])
    needs = depends.combined(
        parents_of(
            api, trigger.project, number, pull, commits=[c for c, _ in commits], open_pulls=others
        ),
        needs_of(api, trigger.project, number, text),
    )
    if needs:
        extra["needs"] = needs
    return TriggerEvent(
        type=trigger.type,
        project=trigger.project,
        branch=str(field(pull, "base", "ref")),
        ref=trigger.ref,
        newrev=sha,
        extra=extra,
    )


DEPENDS_ON = depends.url_pattern(r"(?P<project>[\w.-]+/[\w.-]+)/pull/(?P<number>\d+)")


def _dependency(api: Any, project: str, number: int, pull: Mapping[str, Any]) -> dict[str, Any]:
    sha = str(field(pull, "head", "sha"))
    return {
        "connection": "",
        "project": project,
        "branch": str(field(pull, "base", "ref")),
        "ref": f"refs/pull/{number}/head",
        "commit": sha,
        "statuses": api.statuses(project, sha),
        **_state(pull, api.reviews(project, number)),
    }


def parents_of(
    api: Any,
    project: str,
    number: int,
    pull: Mapping[str, Any],
    *,
    commits: Iterable[str] | None = None,
    open_pulls: Iterable[Mapping[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """Open pull requests whose head is among this one's own commits (built on them).

    A pull request whose branch was made from another pull request's branch
    depends on it as if it said ``Depends-On``: git parent commits. The
    pull request's ``commits`` and the repository's ``open_pulls`` are
    asked of the API when not given; with no other open pull request,
    nothing is asked.
    """
    if open_pulls is None:
        open_pulls = api.open_pulls(project)
    others = [
        (int(field(o, "number")), str(field(o, "head", "sha")), o)
        for o in open_pulls
        if o.get("number") != number
    ]
    if not others:
        return []
    if commits is None:
        base, head = str(field(pull, "base", "ref")), str(field(pull, "head", "sha"))
        commits = api.commits_between(project, base, head)
    return depends.parents(
        number, set(commits), others, lambda n, o: _dependency(api, project, n, o)
    )


def needs_of(api: Any, project: str, number: int, body: str) -> list[dict[str, Any]]:
    """The unmerged pull requests a pull request depends on (:mod:`scheduler.drivers.depends`)."""

    def fetch(dep_project: str, dep_number: int) -> depends.Found:
        if not is_repository(dep_project):
            raise MalformedEventError(f"Depends-On names {dep_project!r}, no GitHub repository")
        pull = api.pull(dep_project, dep_number)
        change = _dependency(api, dep_project, dep_number, pull)
        return depends.Found(bool(pull.get("merged")), str(pull.get("body") or ""), change)

    return depends.needs_of(DEPENDS_ON, fetch, project, number, body)


def translate(
    event: str,
    body: Mapping[str, Any],
    api: Any = None,
    wanted: Callable[[TriggerEvent], bool] | None = None,
) -> list[TriggerEvent]:
    """The trigger events of a webhook, each with its pull request's state (with ``api``).

    Read nothing for what nobody listens to: a comment written by this
    connection itself (its reports), and, with ``wanted`` (whether some
    pipeline's trigger could match an event, before any read), a comment,
    status or check run no trigger asks for. Every other pull request event
    is read and routed: it may take an item out (closed, a new head, a new
    base) or change what a waiting change meets (a review, a label).
    """
    found = _translate(event, body)
    if api is None:
        return [t for t in found if t.type != "status"]  # a status names no pull request
    if event == "issue_comment" and found and _author(body) == api.login():
        return []  # our own report
    if wanted is not None:
        found = [t for t in found if _always_read(t) or wanted(t)]
    return [enrich(t, api) for t in _pulls_of_statuses(found, api)]


def _author(body: Mapping[str, Any]) -> str:
    comment = body.get("comment")
    user = comment.get("user") if isinstance(comment, Mapping) else None
    return str(user.get("login") or "") if isinstance(user, Mapping) else ""


def _always_read(trigger: TriggerEvent) -> bool:
    if trigger.type == "pull_request_review":
        return True
    return trigger.type == "pull_request" and trigger.extra.get("action") != "comment"


def _pulls_of_statuses(found: list[TriggerEvent], api: Any) -> list[TriggerEvent]:
    """A ``status`` event is about a commit: one event per open pull request at its head."""
    result = []
    for trigger in found:
        if trigger.type != "status":
            result.append(trigger)
            continue
        for pull in api.pulls_of_commit(trigger.project, trigger.newrev):
            if pull.get("state") == "open":
                repository = {"repository": {"full_name": trigger.project}}
                result.append(_pull(repository, pull, "status", **trigger.extra))
    return result


def _push(body: Mapping[str, Any]) -> list[TriggerEvent]:
    ref = str(field(body, "ref"))
    before, after = str(body.get("before") or ZERO), str(body.get("after") or ZERO)
    branch = ref[len(HEADS) :] if ref.startswith(HEADS) else ""
    deleted = bool(body.get("deleted")) or after == ZERO
    return [
        TriggerEvent(
            "push",
            _project(body),
            branch=branch,
            ref=ref,
            oldrev=before,
            newrev=after,
            deleted=deleted,
        )
    ]


def _pull_request(body: Mapping[str, Any]) -> list[TriggerEvent]:
    action = str(field(body, "action"))
    extra: dict[str, Any] = {"action": ACTIONS.get(action, action)}
    if action in ("labeled", "unlabeled"):
        extra["label"] = str(field(body, "label", "name"))
    return [_pull(body, field(body, "pull_request"), **extra)]


def _issue_comment(body: Mapping[str, Any]) -> list[TriggerEvent]:
    issue = field(body, "issue")
    if "pull_request" not in issue:
        return []  # a comment on an issue, not a pull request
    pull = {
        "number": field(issue, "number"),
        "head": {"sha": ""},
        "base": {"ref": ""},
        "title": issue.get("title"),
        "labels": issue.get("labels"),
    }
    comment = str(field(body, "comment", "body"))
    return [_pull(body, pull, action="comment", comment=comment)]


def _status(body: Mapping[str, Any]) -> list[TriggerEvent]:
    """About a commit: its open pull requests are found through the API."""
    status = f"{field(body, 'context')}:{field(body, 'state')}"
    sha = _sha(field(body, "sha"), "sha")
    return [TriggerEvent("status", _project(body), newrev=sha, extra={"status": status})]


def _check_run(body: Mapping[str, Any]) -> list[TriggerEvent]:
    run = field(body, "check_run")
    extra = {"action": str(field(body, "action")), "check": str(field(run, "name"))}
    return [_pull(body, pull, "check_run", **extra) for pull in run.get("pull_requests") or []]


def _review(body: Mapping[str, Any]) -> list[TriggerEvent]:
    state = str(field(body, "review", "state")).lower()
    action = str(field(body, "action"))
    pull = field(body, "pull_request")
    return [_pull(body, pull, "pull_request_review", action=action, state=state)]


TRANSLATE: dict[str, Callable[[Mapping[str, Any]], list[TriggerEvent]]] = {
    "push": _push,
    "pull_request": _pull_request,
    "issue_comment": _issue_comment,
    "status": _status,
    "check_run": _check_run,
    "pull_request_review": _review,
}


def _translate(event: str, body: Mapping[str, Any]) -> list[TriggerEvent]:
    found = TRANSLATE.get(event)
    return found(body) if found else []
