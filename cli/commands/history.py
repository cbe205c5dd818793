"""``sluice builds`` and ``sluice buildsets``: build history from SQL.

``--json`` prints a list of objects (the stable interface of
:func:`scheduler.reporting.list_builds` / :func:`~scheduler.reporting.list_buildsets`);
without it, a table.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import click

from cli.commands.common import clear_errors, settings
from scheduler.reporting import list_builds, list_buildsets, open_database

BUILD_COLUMNS = (
    "job",
    "project",
    "ref",
    "pipeline",
    "result",
    "verdict",
    "attempt",
    "end_time",
    "uuid",
)
BUILDSET_COLUMNS = ("project", "ref", "pipeline", "result", "message", "uuid")


def _table(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> str:
    cells = [[str(c).upper() for c in columns]]
    cells += [["" if row.get(c) is None else str(row.get(c)) for c in columns] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(columns))]
    return "\n".join(
        "  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in cells
    )


def _show(rows: Sequence[Mapping[str, Any]], columns: Sequence[str], as_json: bool) -> None:
    plain = [dict(row) for row in rows]
    click.echo(json.dumps(plain, indent=2) if as_json else _table(plain, columns))


def _filters(f: Any) -> Any:
    options = [
        click.option("--tenant", default=None),
        click.option("--project", default=None),
        click.option("--pipeline", default=None),
        click.option("--ref", default=None),
        click.option("--result", default=None, help="e.g. SUCCESS, FAILURE"),
        click.option("--limit", default=50, show_default=True, help="0: no limit"),
        click.option("--json", "as_json", is_flag=True, help="Print JSON."),
    ]
    for option in reversed(options):
        f = option(f)
    return f


@click.command()
@_filters
@click.option("--job", default=None)
@clear_errors
def builds(
    *,
    as_json: bool,
    limit: int,
    job: str | None,
    tenant: str | None,
    project: str | None,
    pipeline: str | None,
    ref: str | None,
    result: str | None,
) -> None:
    """Build attempts, newest first."""
    engine = open_database(settings().database_url)
    rows = list_builds(
        engine,
        job=job,
        tenant=tenant,
        project=project,
        pipeline=pipeline,
        ref=ref,
        result=result,
        limit=limit or None,
    )
    _show(rows, BUILD_COLUMNS, as_json)


@click.command()
@_filters
@clear_errors
def buildsets(
    *,
    as_json: bool,
    limit: int,
    tenant: str | None,
    project: str | None,
    pipeline: str | None,
    ref: str | None,
    result: str | None,
) -> None:
    """Buildsets (one per tested item), newest first."""
    engine = open_database(settings().database_url)
    rows = list_buildsets(
        engine,
        tenant=tenant,
        project=project,
        pipeline=pipeline,
        ref=ref,
        result=result,
        limit=limit or None,
    )
    _show(rows, BUILDSET_COLUMNS, as_json)
