"""``sluice zookeeper secure | digest``: a ZooKeeper closed to all but Sluice.

``secure`` is what ``sluice stack up`` does to the stack's own server, for a
server of a deployment (docker/compose.yaml runs it once the ensemble is
up): ``/``, ``/zookeeper`` and every node an older, open run left get the
ACL of Sluice's identity (``zookeeper.auth``), so a client without its
password can neither create nodes at the top nor list or read the tree
(:mod:`scheduler.zk.acls`). ``digest`` prints a superuser's digest for the
server's ``DigestAuthenticationProvider.superDigest``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from cli.commands.common import clear_errors, settings
from cli.stack.zookeeper import super_digest
from scheduler.errors import SettingsError, SluiceError
from scheduler.settings.reader import read_password_file
from scheduler.settings.sections import ZooKeeperAuth
from scheduler.zk import acls


@click.group()
def zookeeper() -> None:
    """Close a ZooKeeper to clients without Sluice's password; print a superuser's digest."""


@zookeeper.command()
@click.option(
    "--super-password-file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Act as the server's superuser too (user super): for nodes that shut Sluice out.",
)
@clear_errors
def secure(super_password_file: Path | None) -> None:
    """Give /, /zookeeper and every open node the ACL of zookeeper.auth."""
    conf = settings()
    if conf.zookeeper.auth is None:
        raise SettingsError("sluice zookeeper secure needs zookeeper.auth in sluice.yaml")
    also = []
    if super_password_file is not None:
        password = read_password_file(super_password_file, "--super-password-file")
        also.append(ZooKeeperAuth("super", password, super_password_file))
    closing = acls.close_server(conf.zookeeper, also)
    user = conf.zookeeper.auth.username
    click.echo(f"ZooKeeper at {conf.zookeeper.hosts}: closed to all but {user}")
    for path in closing.changed:
        click.echo(f"  ACL set: {path}")
    if closing.refused:
        raise SluiceError(
            f"could not give {user}'s ACL to {', '.join(closing.refused[:5])}: their ACL "
            "shuts it out (--super-password-file, with the server's superDigest, can)"
        )


@zookeeper.command()
@click.argument("user", default="super")
def digest(user: str) -> None:
    """Print USER's digest for ZooKeeper's superDigest (the password read from stdin)."""
    password = sys.stdin.readline().strip()
    if not password:
        raise click.ClickException("no password on stdin")
    click.echo(super_digest(user, password))
