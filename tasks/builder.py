"""The image build task: a nudge naming an image; the work is in ``workers/images``.

``sluice.builder.build IMAGE`` builds the image if it is due and no other
builder builds it (:func:`workers.images.builder.build_image`): the build
lock, not the message, decides who builds, so a duplicate delivery or an
old nudge costs one lock attempt and returns ``busy`` or ``not-due``.

``acks_late=True``: a build may outlast the broker's visibility timeout,
and Redis then delivers the message again while it runs; the second
delivery finds the lock held and returns. A worker killed mid-build leaves
its build ``building``; its lock goes with its ZooKeeper session and the
restarted builder removes the build (docs/nodes.md), whatever became of
the message.
"""

from __future__ import annotations

from typing import Any

from scheduler.errors import SluiceError
from scheduler.nudge import task_names
from scheduler.settings.load import load_settings
from scheduler.zk.client import process_client
from tasks import retrying
from tasks.app import app
from workers.images.builder import ImageBuilder, build_image


class ImageTaskError(SluiceError):
    """The task was sent without an image name."""


@app.task(name=task_names.IMAGE_BUILD, acks_late=True, **retrying.WORKER)
def build(image: str) -> dict[str, Any]:
    """Build ``image`` now if it is due or requested and nobody else builds it."""
    if not isinstance(image, str) or not image:
        raise ImageTaskError(f"{task_names.IMAGE_BUILD}: image must be a non-empty name")
    settings = load_settings()
    builder = ImageBuilder.from_settings(settings, process_client(settings.zookeeper))
    return build_image(builder, image).to_dict()
