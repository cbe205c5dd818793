"""Artifacts: what a build returns under ``zuul.artifacts`` and what a job receives.

A build names its artifacts in its result data, as in Zuul::

    {"zuul": {"log_url": "https://logs.example.org/1/",
              "artifacts": [{"name": "image", "url": "image.tar",
                             "metadata": {"type": "container_image"}}]}}

:func:`returned` reads them: Zuul's schema (each artifact an object with a
string ``name`` and ``url`` and an optional object ``metadata``; result data
that breaks it returns no artifact at all, as in Zuul), a relative ``url``
joined to the build's ``zuul.log_url``. :func:`received` adds where each came
from (``project``, ``change``, ``patchset``, ``job``): what a job finds in its
``zuul.artifacts`` variable.
"""

from __future__ import annotations

import contextlib
import re
import urllib.parse
from collections.abc import Iterable, Mapping
from typing import Any

from scheduler.model.change import Change

# Gerrit, GitHub and GitLab refs of a change: its number and patchset (Gerrit only)
CHANGE_REFS = (
    re.compile(r"refs/changes/\d+/(?P<change>\d+)/(?P<patchset>\d+)"),
    re.compile(r"refs/pull/(?P<change>\d+)/(?:head|merge)"),
    re.compile(r"refs/merge-requests/(?P<change>\d+)/(?:head|merge)"),
)


def change_numbers(ref: str) -> dict[str, str]:
    """``{"change", "patchset"}`` of a change's ref (what it has of them); {} for a branch."""
    for pattern in CHANGE_REFS:
        match = pattern.fullmatch(ref)
        if match is not None:
            return {k: v for k, v in match.groupdict().items() if v is not None}
    return {}


def _valid(artifact: Any) -> bool:
    if not isinstance(artifact, Mapping):
        return False
    if not isinstance(artifact.get("name"), str) or not isinstance(artifact.get("url"), str):
        return False
    return "metadata" not in artifact or isinstance(artifact["metadata"], Mapping)


def returned(result_data: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The artifacts a build returned (Zuul's schema; none if its data breaks it)."""
    zuul = result_data.get("zuul")
    if zuul is None:
        return []
    if not isinstance(zuul, Mapping):
        return []
    artifacts = zuul.get("artifacts", [])
    log_url = zuul.get("log_url")
    if not isinstance(artifacts, list) or not all(_valid(a) for a in artifacts):
        return []
    if log_url is not None and not isinstance(log_url, str):
        return []
    base = log_url if not log_url or log_url.endswith("/") else log_url + "/"
    found = []
    for artifact in artifacts:
        entry: dict[str, Any] = {"name": artifact["name"], "url": artifact["url"]}
        if base:
            with contextlib.suppress(ValueError):  # Zuul keeps the url as it is
                entry["url"] = urllib.parse.urljoin(base, artifact["url"])
        if "metadata" in artifact:
            entry["metadata"] = dict(artifact["metadata"])
        found.append(entry)
    return found


def received(result_data: Mapping[str, Any], change: Change, job: str) -> list[dict[str, Any]]:
    """The artifacts of ``job``'s build of ``change`` as a job receives them."""
    origin: dict[str, Any] = {"project": change.project, "job": job}
    if not change.is_branch_update:
        origin["branch"] = change.branch
    origin.update(change_numbers(change.ref))
    return [{**artifact, **origin} for artifact in returned(result_data)]


def merged(*groups: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The artifacts of ``groups`` in order, each once (Zuul de-duplicates equal ones)."""
    found: list[dict[str, Any]] = []
    for group in groups:
        for artifact in group:
            if artifact not in found:
                found.append(artifact)
    return found
