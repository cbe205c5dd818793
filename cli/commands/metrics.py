"""``sluice metrics``: a standalone Prometheus exporter (``/metrics``)."""

from __future__ import annotations

import time

import click

from cli.commands.common import clear_errors, settings


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=9090, show_default=True, help="Port to listen on.")
@clear_errors
def metrics(host: str, port: int) -> None:
    """Serve Prometheus metrics read from ZooKeeper and SQL at /metrics."""
    from prometheus_client import start_http_server

    from scheduler import metrics as sluice_metrics
    from scheduler.reporting import get_engine
    from scheduler.zk.client import connect

    conf = settings()
    client = connect(conf.zookeeper)
    registry = sluice_metrics.registry(client, get_engine(conf.database_url))
    server, thread = start_http_server(port, addr=host, registry=registry)
    click.echo(f"serving metrics at http://{host}:{server.server_port}/metrics", err=True)
    try:
        while thread.is_alive():
            time.sleep(1)
    finally:
        server.shutdown()
        client.stop()
        client.close()
