"""Celery's event dispatcher, publishing the workers' task events the fast way.

The app's ``events`` (``tasks/app.py``): a thin adapter that hands each
event to :func:`scheduler.nudge.kept_connection.publish_event`, which
writes kombu's message itself and publishes it over the process's kept
Redis connection, and lets kombu publish it when that declines (another
broker, another event layout, ``broker.fast_send: false``, a failed
publish). It stays with the Celery app because all it does is plug into
Celery's ``EventDispatcher``; what an event message is and where it goes
are the nudge package's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from celery.app.events import Events
from celery.events.dispatcher import EventDispatcher

from scheduler.nudge import kept_connection

if TYPE_CHECKING:
    from celery import Celery


class FastEventDispatcher(EventDispatcher):
    """Celery's event dispatcher, publishing over the kept connection when it can."""

    # set by EventDispatcher.__init__ (celery-types does not declare them)
    app: Celery
    exchange: Any
    headers: dict[str, Any]
    delivery_mode: int

    def _publish(
        self, event: Any, producer: Any, routing_key: str, *args: Any, **kwargs: Any
    ) -> None:
        if producer is None:  # disabled or closed: nothing is published, as in Celery
            return
        published = kept_connection.publish_event(
            self.app,
            event,
            exchange=self.exchange.name,
            routing_key=routing_key,
            headers=self.headers,
            delivery_mode=self.delivery_mode,
        )
        if not published:
            super()._publish(event, producer, routing_key, *args, **kwargs)  # type: ignore[misc]


class FastEvents(Events):
    """``app.events`` whose dispatchers are :class:`FastEventDispatcher`."""

    dispatcher_cls = f"{__name__}:FastEventDispatcher"
