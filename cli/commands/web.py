"""``sluice web``: the REST API, status pages, health and metrics (uvicorn)."""

from __future__ import annotations

import click

from cli.commands.common import clear_errors, settings


@click.command()
@click.option("--listen", default=None, help="HOST:PORT (default: web.listen, 127.0.0.1:9000).")
@click.option("--log-level", default="info", show_default=True, help="uvicorn's log level.")
@clear_errors
def web(listen: str | None, log_level: str) -> None:
    """Serve the REST API, the status pages, /health and /metrics over HTTP."""
    from dataclasses import replace

    from scheduler.settings.exposure import refuse_open_web

    conf = settings()
    if listen:
        conf = replace(conf, web=replace(conf.web, listen=listen))
    # outside loopback only with an authenticator (or web.allow_unauthenticated),
    # refused before the app is even imported
    refuse_open_web(conf.web)

    import uvicorn

    from web.app import create_app

    host, port = conf.web.host, conf.web.port
    click.echo(f"serving Sluice at http://{host}:{port}/ (API at /api)", err=True)
    # One process, many threads: every request's ZooKeeper and SQL calls run in
    # the thread pool; more processes are more instances behind a balancer.
    uvicorn.run(create_app(conf), host=host, port=port, log_level=log_level, access_log=False)
