"""``sluice demo``: the main job of ``make run``.

On the running local stack: create a sample tenant (a config project and two
projects sharing a gate queue, as bare repositories under the state dir),
propose changes into ``check`` and ``gate`` (one of each fails), show every
item and job live until nothing is pending, then summarize what happened and
what was merged. Run it with the demo configuration (``make run`` does):
``sluice --config demo/sluice.yaml demo``.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import click

from cli.commands.common import clear_errors, settings
from cli.commands.state import status_document, zookeeper
from cli.commands.system import roundtrip
from cli.demo import live, repos
from scheduler.errors import SluiceError
from scheduler.management import enqueue_change
from scheduler.reconfiguration import merger_fetch, reconfigure
from scheduler.reporting import estimate_durations, list_buildsets, open_database
from scheduler.settings.sections import Settings
from scheduler.views.idle import pending_work

TENANT = "demo"


class DemoError(SluiceError):
    """The demo cannot run with this configuration or stack."""


def _changes(run: str) -> list[tuple[str, str, str, dict[str, str]]]:
    """(pipeline, project, branch, files) of one demo run."""
    return [
        ("check", "app", f"feature-{run}", {"src/feature.py": "def feature():\n    return 1\n"}),
        ("check", "lib", f"docs-{run}", {"README.md": "# lib\n"}),
        ("check", "app", f"broken-{run}", {"src/wip.py": "x = (\n", "BROKEN": "oops\n"}),
        ("gate", "app", f"gate-a-{run}", {f"src/a_{run}.py": "A = 1\n"}),
        ("gate", "lib", f"gate-b-{run}", {f"src/b_{run}.py": "B = 1\n", "BROKEN": "oops\n"}),
        ("gate", "app", f"gate-c-{run}", {f"src/c_{run}.py": "C = 1\n"}),
    ]


def _repo_root(conf: Settings) -> Path:
    connection = conf.connections.get(TENANT)
    if connection is None or "://" in connection.baseurl:
        raise DemoError(
            "the demo needs its configuration: run `sluice --config demo/sluice.yaml demo` "
            "(`make run` does)"
        )
    return Path(connection.baseurl)


def _watch(conf: Settings, refs: set[str], timeout: float) -> None:
    engine = open_database(conf.database_url)
    jobs = ["lint", "unit", "integration", "lib-unit"]
    estimates = estimate_durations(engine, tenant=TENANT, jobs=jobs)
    tty = sys.stdout.isatty()
    deadline = time.monotonic() + timeout
    last = ""
    with zookeeper() as client:
        while True:
            view = live.render(status_document(client, TENANT), estimates, refs)
            if view != last:
                if tty:
                    click.echo("\x1b[H\x1b[J" + view)
                else:
                    click.echo(view + "\n")
                last = view
            if not pending_work(client):
                return
            if time.monotonic() > deadline:
                raise DemoError(f"still busy after {timeout:.0f}s; see `sluice status`")
            time.sleep(0.5)


def _summary(conf: Settings, refs: set[str], root: Path, bases: dict[str, str]) -> None:
    engine = open_database(conf.database_url)
    rows: list[dict[str, Any]] = [
        dict(b) for b in list_buildsets(engine, tenant=TENANT) if b["ref"] in refs
    ]
    click.echo("\nResults")
    click.echo(f"  {'PIPELINE':<8} {'PROJECT':<6} {'CHANGE':<22} {'RESULT':<10} MESSAGE")
    for row in sorted(rows, key=lambda r: (r["pipeline"], str(r["ref"]))):
        message = (row.get("message") or "")[:50]
        click.echo(
            f"  {row['pipeline']:<8} {row['project']:<6} {row['ref']:<22} "
            f"{row['result']:<10} {message}"
        )
    click.echo("\nMerged by the gate")
    for project, base in bases.items():
        for line in repos.merged_since(root, project, base) or ["(nothing)"]:
            click.echo(f"  {project} main: {line}")


NEXT = """
Where to look next
  {web}/t/{tenant}/status
                                                   the live status page (REST API: {web}/api)
  sluice --config demo/sluice.yaml status          pipelines, items, jobs (add --json)
  sluice --config demo/sluice.yaml builds          build history from SQL (also: buildsets)
  {logs}/<build uuid>/job-output.txt
                                                   each build's log
  sluice --config demo/sluice.yaml stack up --flower
                                                   the tasks in Flower (its login printed once)
  sluice --config demo/sluice.yaml components      the workers registered in ZooKeeper
  make run                                         propose another round of changes
  sluice --config demo/sluice.yaml stack down      stop the stack
"""


@click.command()
@click.option("--timeout", default=300.0, show_default=True, help="Seconds to wait for idle.")
@click.pass_context
@clear_errors
def demo(ctx: click.Context, timeout: float) -> None:
    """Run the sample tenant through check and gate, live, on the local stack."""
    conf = settings()
    root = _repo_root(conf)
    ctx.invoke(roundtrip)
    created = repos.ensure_repositories(root)
    if created:
        click.echo(f"created repositories {', '.join(created)} under {root}")
    with zookeeper() as client:
        result = reconfigure(client, conf, merger_fetch(client, conf), TENANT)[TENANT]
        click.echo(f"tenant {TENANT}: layout {result.state.uuid}")
        for message in result.messages:
            click.echo(f"  {message}", err=True)
        run = time.strftime("%H%M%S")
        bases = {p: repos.head(root, p) for p in ("app", "lib")}
        refs = set()
        for pipeline, project, branch, files in _changes(run):
            repos.propose(root, project, branch, files, f"{project}: {branch}")
            item = enqueue_change(client, conf, TENANT, pipeline, project, "main", branch)
            click.echo(f"enqueued {project} {branch} into {pipeline} as item {item}")
            refs.add(branch)
    _watch(conf, refs, timeout)
    _summary(conf, refs, root, bases)
    click.echo(NEXT.format(logs=conf.log_dir, web=conf.web.url, tenant=TENANT))
