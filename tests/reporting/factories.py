"""Small builders of reporting records for the tests."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import Engine

from scheduler.reporting import BuildInfo, BuildsetInfo, RefInfo

T0 = datetime(2026, 11, 22, 12, 0, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def buildset(
    uuid: str = "bs-1",
    *,
    tenant: str = "acme",
    pipeline: str = "check",
    project: str = "org/app",
    branch: str = "main",
    ref: str = "refs/heads/topic",
    newrev: str = "a" * 40,
) -> BuildsetInfo:
    return BuildsetInfo(
        uuid=uuid,
        tenant=tenant,
        pipeline=pipeline,
        ref=RefInfo(project=project, branch=branch, ref=ref, change=ref, newrev=newrev),
        event_id=f"event-{uuid}",
    )


def build(
    uuid: str = "b-1", job: str = "unit", *, attempt: int = 1, voting: bool = True
) -> BuildInfo:
    return BuildInfo(uuid=uuid, job=job, attempt=attempt, voting=voting, nodeset="ubuntu")


def url_of(engine: Engine) -> str:
    """The URL an engine was made from, password included."""
    return engine.url.render_as_string(hide_password=False)
