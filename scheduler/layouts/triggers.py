"""Which pipelines of a tenant an event triggers (the git driver's trigger semantics).

An event is a JSON mapping as the connection queues carry it::

    {"type": "ref-updated", "connection": "git", "project": "app",
     "branch": "main", "ref": "refs/heads/main", "oldrev": "...", "newrev": "..."}

A pipeline is triggered when one of its trigger filters for the event's
connection matches, AND the project runs jobs in that pipeline on that
branch (Zuul drops an event of a project that is not in the pipeline; doing
it here saves a pipeline pass). A git trigger filter, as Zuul documents it
for its git driver, plus what a git merge queue needs:

* ``event``: a name or a list; the event's ``type`` (or ``event``) must be
  one of them (the git driver emits ``ref-updated``).
* ``ref``: a regex or a list; one must match (``re.match``, anchored at the
  start as in Zuul) the full ref, ``refs/heads/<branch>`` for a branch given
  by its short name.
* ``branch`` (Sluice): a regex or a list, matched against the branch name,
  so ``branch: ^main$`` reads as it says.
* ``ignore-deletes`` (default true): a ref deletion (``newrev`` all zeros,
  or ``deleted: true``) does not match.

Patterns go through the configuration's restricted regex policy
(:func:`scheduler.config.regex.compile_matcher`); a refused pattern matches
nothing and is logged once.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Mapping, Sequence
from typing import Any

from scheduler.config.regex import RegexPolicyError, compile_matcher
from scheduler.layouts.state import TenantLayout

log = logging.getLogger(__name__)

HEADS = "refs/heads/"


@functools.lru_cache(maxsize=1024)
def _pattern(text: str) -> re.Pattern[str] | None:
    try:
        return compile_matcher(text)
    except (RegexPolicyError, re.error) as exc:
        log.error("trigger pattern %r refused: %s", text, exc)
        return None


def _names(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, Sequence):
        return [str(v) for v in value]
    return [str(value)]


def _any_match(patterns: list[str], value: str) -> bool:
    for text in patterns:
        pattern = _pattern(text)
        if pattern is not None and pattern.match(value):
            return True
    return False


def full_ref(event: Mapping[str, Any]) -> str:
    """The event's ref as a full ref name (``main`` -> ``refs/heads/main``)."""
    ref = str(event.get("ref") or event.get("branch") or "")
    return ref if ref.startswith("refs/") else HEADS + ref


def branch_of(event: Mapping[str, Any]) -> str:
    branch = str(event.get("branch") or "")
    if branch:
        return branch
    ref = full_ref(event)
    return ref[len(HEADS) :] if ref.startswith(HEADS) else ""


def is_deletion(event: Mapping[str, Any]) -> bool:
    newrev = str(event.get("newrev") or "")
    return bool(event.get("deleted")) or (bool(newrev) and set(newrev) == {"0"})


def filter_matches(spec: Mapping[str, Any], event: Mapping[str, Any]) -> bool:
    """Whether one trigger filter of a git connection matches ``event``."""
    kind = str(event.get("type") or event.get("event") or "")
    if kind not in _names(spec.get("event")):
        return False
    if spec.get("ignore-deletes", True) and is_deletion(event):
        return False
    refs = _names(spec.get("ref"))
    if refs and not _any_match(refs, full_ref(event)):
        return False
    branches = _names(spec.get("branch"))
    if branches and not _any_match(branches, branch_of(event)):
        return False
    return _forge_matches(spec, event)


def could_match(layout: TenantLayout, event: Mapping[str, Any]) -> bool:
    """Whether a trigger filter of the tenant could match ``event`` once the forge is asked.

    Before the forge is read, a comment event knows its type, action and
    text but not its branch: every filter key but the ref and branch ones
    is checked (a driver skips the reads of an event no filter could match).
    """
    connection = str(event.get("connection") or "")
    kind = str(event.get("type") or event.get("event") or "")
    for pipeline in layout.layout.pipelines.values():
        for spec in pipeline.trigger.get(connection, ()):
            if kind in _names(spec.get("event")) and _forge_matches(spec, event):
                return True
    return False


def _forge_matches(spec: Mapping[str, Any], event: Mapping[str, Any]) -> bool:
    """Forge filters: ``action``, ``comment``, ``label``, ``state``, ``status``, ``check``."""
    actions = _names(spec.get("action"))
    if actions and str(event.get("action") or "") not in actions:
        return False
    comments = _names(spec.get("comment"))
    if comments and not _any_match(comments, str(event.get("comment") or "")):
        return False
    labels = _names(spec.get("label"))
    if labels and str(event.get("label") or "") not in labels:
        return False
    states = _names(spec.get("state"))
    if states and str(event.get("state") or "") not in states:
        return False
    statuses = _names(spec.get("status"))  # regexes over "<context>:<state>"
    if statuses and not _any_match(statuses, str(event.get("status") or "")):
        return False
    checks = _names(spec.get("check"))  # regexes over the check run's name
    return not (checks and not _any_match(checks, str(event.get("check") or "")))


ENQUEUE, WAIT = "enqueue", "wait"


def pipelines_for_event(layout: TenantLayout, event: Mapping[str, Any]) -> list[str]:
    """Names of the tenant's pipelines that ``event`` triggers, sorted."""
    return [name for name, verdict in verdicts(layout, event).items() if verdict == ENQUEUE]


def verdicts(layout: TenantLayout, event: Mapping[str, Any]) -> dict[str, str]:
    """The pipelines whose triggers ``event`` matches, each with what becomes of its change.

    :data:`ENQUEUE`, or :data:`WAIT` where the change meets the pipeline's
    requirements but a change it depends on does not yet (it is enqueued
    behind that change when the change enters the pipeline).
    """
    connection = str(event.get("connection") or "")
    project = str(event.get("project") or "")
    held = layout.tenant.project(project)
    if held is None or held.connection != connection:
        return {}
    found: dict[str, str] = {}
    for name in sorted(layout.layout.pipelines):
        filters = layout.layout.pipelines[name].trigger.get(connection, ())
        if not any(filter_matches(f, event) for f in filters):
            continue
        verdict = requirements_verdict(layout, name, event)
        if verdict:
            found[name] = verdict
    return found


def requirements_verdict(layout: TenantLayout, pipeline_name: str, event: Mapping[str, Any]) -> str:
    """Whether the change of ``event`` may enter the pipeline, triggers aside.

    :data:`ENQUEUE`, :data:`WAIT` (a dependency does not meet the
    requirements yet), or "" (it does not meet them, is rejected, or the
    project runs no jobs there).
    """
    pipeline = layout.layout.pipelines.get(pipeline_name)
    connection = str(event.get("connection") or "")
    if pipeline is None:
        return ""
    require = pipeline.require.get(connection)
    if require is not None and not requirements_met(require, event):
        return ""
    reject = pipeline.reject.get(connection)
    if reject is not None and _any_requirement(reject, event):
        return ""
    if not layout.layout.project_pipelines(
        str(event.get("project") or ""), branch_of(event), pipeline_name
    ):
        return ""
    if require is not None and not _needs_ready(require, event):
        log.info(
            "%s: a dependency of %s does not meet its requirements yet",
            pipeline_name,
            event.get("ref"),
        )
        return WAIT
    return ENQUEUE


def _checks(spec: Mapping[str, Any], event: Mapping[str, Any]) -> list[bool]:
    """One result per requirement of ``spec`` (a pipeline's ``require:`` for a forge)."""
    results = []
    for key in ("open", "merged", "draft", "approved"):
        if key in spec:
            value = bool(event.get(key)) if key != "approved" else _approved(event)
            results.append(value == bool(spec[key]))
    labels = set(_names(event.get("labels")))
    for key in ("label", "labels"):
        if key in spec:
            results.append(set(_names(spec[key])) <= labels)
    if "review" in spec:
        approvals = _names(event.get("approvals"))
        for review in spec["review"] if isinstance(spec["review"], list) else [spec["review"]]:
            wanted = str(review.get("type", "approved")) if isinstance(review, Mapping) else ""
            users = _names(review.get("username")) if isinstance(review, Mapping) else []
            if wanted != "approved":
                results.append(False)  # only approvals are known from the forge so far
            elif users:
                results.append(any(_any_match(users, a) for a in approvals))
            else:
                results.append(bool(approvals))
    if "status" in spec:  # regexes over "<context>:<state>" of the head's latest statuses
        statuses = _names(event.get("statuses"))
        for wanted in _names(spec["status"]):
            results.append(any(_any_match([wanted], status) for status in statuses))
    return results


def _approved(event: Mapping[str, Any]) -> bool:
    """The forge's own verdict where it gives one (GitLab's ``approved``), else any approval."""
    if "approved" in event:
        return bool(event["approved"])
    return bool(event.get("approvals"))


def _needs_ready(spec: Mapping[str, Any], event: Mapping[str, Any]) -> bool:
    """Every dependency (``needs``, as the driver found them) meets the requirements too."""
    needs = [n for n in event.get("needs") or () if isinstance(n, Mapping)]
    others = [
        n
        for n in needs
        if (n.get("project"), n.get("ref")) != (event.get("project"), event.get("ref"))
    ]
    return all(requirements_met(spec, n) for n in others)


def requirements_met(spec: Mapping[str, Any], event: Mapping[str, Any]) -> bool:
    """Whether the change an event is about meets every requirement (``require:``)."""
    return all(_checks(spec, event))


def _any_requirement(spec: Mapping[str, Any], event: Mapping[str, Any]) -> bool:
    """``reject:``: any of its conditions holding rejects the change."""
    return any(_checks(spec, event))


def default_branch(layout: TenantLayout, project: str) -> str:
    """The branch a project's non-branch refs (tags) are tested on.

    The project's ``default-branch`` if its configuration names one, else
    ``main`` or ``master`` if it has that branch, else its first branch.
    """
    for stanza in layout.layout.projects.get(project, ()):
        if stanza.default_branch:
            return stanza.default_branch
    branches = layout.layout.branches.get(project, ())
    for name in ("main", "master"):
        if name in branches:
            return name
    return branches[0] if branches else "main"
