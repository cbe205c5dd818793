"""``sluice stack up | down | status``."""

from __future__ import annotations

import time

import click

from cli.commands.common import clear_errors, settings
from cli.stack.local import LocalStack, describe
from cli.stack.workers import EXECUTOR_CONCURRENCY
from scheduler.nudge import dispatch
from scheduler.reconfiguration import (
    ReconfigurationError,
    check_tenant_file,
    reconfigure_error,
    tenant_names,
)
from scheduler.settings.sections import Settings
from scheduler.stores import config_cache
from scheduler.zk.client import connect

# How long `stack up` waits for the tenants' first layouts.
LAYOUT_WAIT = 120.0


@click.group()
def stack() -> None:
    """Run the local stack: ZooKeeper, Redis, Celery workers and the web."""


@stack.command()
@click.option("--concurrency", default=2, show_default=True, help="Processes per worker.")
@click.option(
    "--executor-concurrency",
    default=EXECUTOR_CONCURRENCY,
    show_default=True,
    help="Processes of the executor worker: builds it runs at once.",
)
@click.option("--flower", is_flag=True, help="Also start Flower (its login is printed once).")
@clear_errors
def up(concurrency: int, executor_concurrency: int, flower: bool) -> None:
    """Start every missing component and wait until all answer."""
    conf = settings()
    local = LocalStack(
        conf, worker_concurrency=concurrency, executor_concurrency=executor_concurrency
    )
    local.up(flower=flower)
    for note in local.notes:
        click.echo(f"note: {note}", err=True)
    click.echo(describe(local.status()))
    click.echo(f"Web: {conf.web.url}/  (status pages; the REST API under /api)")
    running = local.load().get("flower")
    if local.flower_login is not None and running is not None:
        user, password = local.flower_login.split(":", 1)
        click.echo(f"Flower: {running.address}  user {user}  password {password}  (shown only now)")
    elif flower and running is not None:
        login = "flower.basic_auth_file" if conf.flower.basic_auth_file else "printed at its start"
        click.echo(f"Flower: {running.address}  (login: {login})")
    load_tenants(local.settings)


def load_tenants(conf: Settings) -> None:
    """Ask for every tenant's layout (Zuul loads them all at start) and wait for them."""
    client = connect(conf.zookeeper)
    try:
        try:
            asked = check_tenant_file(
                client, conf, lambda task, args: dispatch.send(task, *args, settings=conf)
            )
            named = set(tenant_names(conf))
        except ReconfigurationError as exc:
            click.echo(f"no tenants loaded: {exc}", err=True)
            return
        for tenant in (t for t in asked if t not in named):
            click.echo(f"tenant {tenant}: no longer in the tenant file (retired)")
        asked = [t for t in asked if t in named]
        deadline = time.monotonic() + LAYOUT_WAIT
        waiting = list(asked)
        failed: dict[str, str] = {}
        while waiting and time.monotonic() < deadline:
            failed.update((t, e) for t in waiting if (e := reconfigure_error(client, t)))
            waiting = [
                t
                for t in waiting
                if t not in failed and config_cache.load_layout_state(client, t) is None
            ]
            time.sleep(0.2 if waiting else 0)
        for tenant in asked:
            if tenant in failed:
                state = f"not loaded yet: {failed[tenant]} (the sweep asks again)"
            else:
                state = "not loaded yet" if tenant in waiting else "loaded"
            click.echo(f"tenant {tenant}: {state}")
    finally:
        client.stop()
        client.close()


@stack.command()
@clear_errors
def down() -> None:
    """Stop exactly what `sluice stack up` started."""
    local = LocalStack(settings())
    stopped = local.down()
    for component in stopped:
        click.echo(f"stopped {component.name} (pid {component.pid})")
    for what in local.left_alone:
        click.echo(f"left alone {what}", err=True)
    if not stopped:
        click.echo("nothing to stop")


@stack.command()
@clear_errors
def status() -> None:
    """Show each component, its pid, address and health (exit 1 if any is unhealthy)."""
    statuses = LocalStack(settings()).status()
    if not statuses:
        click.echo("the stack is not running (sluice stack up starts it)")
        raise SystemExit(1)
    click.echo(describe(statuses))
    if not all(st.healthy for st in statuses):
        raise SystemExit(1)
