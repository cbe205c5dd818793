"""``sluice encrypt``: a secret for a project's jobs, as ``zuul-client encrypt`` writes it.

The options and the output are zuul-client's: the plaintext from
``--infile`` (as is) or standard input (stripped unless ``--no-strip``),
encrypted with the project's public key (read through the keystore in
ZooKeeper, made on first use), printed as a ``- secret:`` stanza whose
field holds the ``!encrypted/pkcs1-oaep`` chunks, each wrapped at 79
columns, to paste into the project's ``zuul.yaml``.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import click

from cli.commands.common import clear_errors, settings, zookeeper

# zuul-client's lines: "        - " then the chunk, continued under it, 79 columns in all.
WIDTH = 79
ITEM_INDENT = 8
CONTINUED_INDENT = 10


def secret_yaml(name: str | None, field: str | None, chunks: Sequence[str]) -> str:
    """The stanza of zuul-client's ``encrypt`` (placeholders for a missing name or field)."""
    lines = [
        "",
        "- secret:",
        f"    name: {name or '<name>'}",
        "    data:",
        f"      {field or '<fieldname>'}: !encrypted/pkcs1-oaep",
    ]
    first = WIDTH - ITEM_INDENT - 2
    rest = WIDTH - CONTINUED_INDENT
    for chunk in chunks:
        lines.append(" " * ITEM_INDENT + "- " + chunk[:first])
        lines += [
            " " * CONTINUED_INDENT + chunk[i : i + rest] for i in range(first, len(chunk), rest)
        ]
    return "\n".join(lines) + "\n"


@click.command()
@click.option("--tenant", required=True, help="The tenant that has the project.")
@click.option("--project", required=True, help="The project whose jobs use the secret.")
@click.option("--secret-name", default=None, help="The secret's name (default: a placeholder).")
@click.option("--field-name", default=None, help="The field's name (default: a placeholder).")
@click.option(
    "--infile",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Encrypt this file's content, as is (default: standard input).",
)
@click.option(
    "--outfile",
    type=click.Path(dir_okay=False, writable=True, path_type=Path),
    help="Write the stanza to this file (default: standard output).",
)
@click.option(
    "--no-strip",
    is_flag=True,
    help="Keep whitespace around standard input (a file is always kept as is).",
)
@clear_errors
def encrypt(
    *,
    tenant: str,
    project: str,
    secret_name: str | None,
    field_name: str | None,
    infile: Path | None,
    outfile: Path | None,
    no_strip: bool,
) -> None:
    """Encrypt a secret with PROJECT's public key; prints the secret stanza (as zuul-client)."""
    from scheduler.crypto import encrypt_pkcs1_oaep
    from scheduler.project_keys import public_key

    if infile is not None:
        plaintext = infile.read_bytes()
    else:
        plaintext = sys.stdin.buffer.read()
        if not no_strip:
            plaintext = plaintext.strip()
    conf = settings()
    conf.keystore.require_password()  # before connecting: the likeliest mistake first
    with zookeeper(conf) as client:
        pem = public_key(client, conf, tenant, project)
    output = secret_yaml(secret_name, field_name, encrypt_pkcs1_oaep(pem, plaintext))
    if outfile is not None:
        outfile.write_text(output)
    else:
        click.echo(output)
