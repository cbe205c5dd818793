"""``sluice image``: request, list and delete image builds (seed 004, docs/nodes.md)."""

from __future__ import annotations

import datetime
import json
from typing import Any

import click

from cli.commands.common import clear_errors, settings, zookeeper
from scheduler.errors import SluiceError


class ImageCommandError(SluiceError):
    """An image or build that does not exist, or cannot be deleted now."""


@click.group()
def image() -> None:
    """Build images now, list builds and uploads, delete builds."""


@image.command("build")
@click.argument("name")
@clear_errors
def build(name: str) -> None:
    """Build image NAME now, off its schedule (raises its request-build flag)."""
    from scheduler.nudge import dispatch, task_names
    from scheduler.stores.images import ImageStore

    conf = settings()
    if conf.images.image(name) is None:
        known = ", ".join(sorted(conf.images.diskimages)) or "none"
        raise ImageCommandError(f"no image {name!r} in the settings (images: {known})")
    with zookeeper(conf) as client:
        ImageStore(client).request_build(name)
    click.echo(f"build of {name} requested")
    # the flag is the request; the nudge only saves waiting for a builder's next check
    try:
        dispatch.send_quickly(task_names.IMAGE_BUILD, name, settings=conf)
    except SluiceError as exc:
        click.echo(f"(no nudge sent: {exc}; a builder's next check starts the build)")


def _when(seconds: float) -> str:
    stamp = datetime.datetime.fromtimestamp(seconds, datetime.UTC)
    return stamp.strftime("%Y-%m-%d %H:%M:%S")


def _listing(names: tuple[str, ...]) -> list[dict[str, Any]]:
    from scheduler.stores.images import ImageStore

    conf = settings()
    with zookeeper(conf) as client:
        store = ImageStore(client)
        wanted = list(names) or sorted(set(store.images()) | set(conf.images.diskimages))
        rows = []
        for name in wanted:
            builds = []
            for b in store.builds(name):
                uploads = [
                    {"provider": u.provider, "id": u.id, **u.to_dict()}
                    for u in store.all_uploads(b)
                ]
                builds.append({"id": b.id, **b.to_dict(), "uploads": uploads})
            rows.append(
                {
                    "image": name,
                    "requested": store.build_requested(name),
                    "building": store.build_lock_holders(name),
                    "builds": builds,
                }
            )
    return rows


@image.command("list")
@click.argument("names", nargs=-1)
@click.option("--json", "as_json", is_flag=True, help="Print the stable JSON form.")
@clear_errors
def list_images(names: tuple[str, ...], as_json: bool = False) -> None:
    """Images with their builds and uploads, states and state times."""
    rows = _listing(names)
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        click.echo("no images")
        return
    for row in rows:
        notes = []
        if row["requested"]:
            notes.append("build requested")
        if row["building"]:
            notes.append(f"locked by {', '.join(row['building'])}")
        click.echo(f"{row['image']}" + (f"  ({'; '.join(notes)})" if notes else ""))
        for b in row["builds"]:
            when = _when(b["state_time"])
            click.echo(
                f"  build {b['id']}  {b['state']:<8}  {when}  {b['builder']}  {b['filename']}"
            )
            for u in b["uploads"]:
                click.echo(
                    f"    {u['provider']} upload {u['id']}  {u['state']:<9}  "
                    f"{_when(u['state_time'])}  {u['external_id']}"
                )


@image.command("delete")
@click.argument("name")
@click.argument("build_id")
@clear_errors
def delete(name: str, build_id: str) -> None:
    """Delete build BUILD_ID of image NAME (its state becomes delete; its builder removes it)."""
    from scheduler.stores.images import ImageBuildState, ImageStore, ImageStoreError

    with zookeeper() as client:
        store = ImageStore(client)
        found = store.build(name, build_id) or store.build(name, build_id.zfill(10))
        if found is None:
            raise ImageCommandError(f"image {name} has no build {build_id}")
        # its builder holds the lock: in progress (or about to be cleaned up by it)
        if found.state == ImageBuildState.BUILDING and found.builder in store.build_lock_holders(
            name
        ):
            raise ImageCommandError(
                f"build {found.id} of {name} is in progress; delete it once it has finished"
            )
        try:
            store.mark_delete(name, found.id)
        except ImageStoreError as exc:
            raise ImageCommandError(str(exc)) from None
    click.echo(f"build {found.id} of {name}: delete")
