"""``sluice retry``: operations on Celery tasks by id."""

from __future__ import annotations

import click

from cli.commands.common import clear_errors, settings


@click.command("retry")
@click.argument("task_id")
@click.option(
    "--flower",
    "flower_url",
    envvar="SLUICE_FLOWER_URL",
    help=(
        "Flower's URL (http://user:password@host:port), to find tasks the result backend"
        " does not keep: those that never ran, and builds, merges and hops that ended well."
    ),
)
@clear_errors
def retry(task_id: str, flower_url: str | None) -> None:
    """Send the Sluice task TASK_ID again (same task and arguments, a new id).

    Safe for any Sluice task: a task whose work is done finds it done and
    returns; one whose nudge was lost does the work.
    """
    from scheduler.nudge import resend, task_labels

    conf = settings()
    task = resend.find(task_id, conf, flower_url)
    new_id = resend.send_again(task, conf)
    about = task_labels.label(task.name, [*task.args, *task.kwargs.values()])
    click.echo(f"re-sent {task.name} ({about}), found in {task.source}, as {new_id}")
