"""Pipeline managers: how items move through a pipeline (Zuul's managers).

:mod:`scheduler.manager.base` holds the shared rules; each manager kind is a
small subclass (:mod:`scheduler.manager.shared` for the gating ones).
:func:`manager_class` picks one by the pipeline's ``manager``.
"""

from __future__ import annotations

from scheduler.manager.base import PipelineManager
from scheduler.manager.dependent import DependentManager
from scheduler.manager.independent import IndependentManager
from scheduler.manager.serial import SerialManager
from scheduler.manager.supercedent import SupercedentManager

MANAGERS: dict[str, type[PipelineManager]] = {
    manager.kind: manager
    for manager in (IndependentManager, DependentManager, SerialManager, SupercedentManager)
}


def manager_class(kind: str) -> type[PipelineManager]:
    try:
        return MANAGERS[kind]
    except KeyError:
        raise ValueError(f"unknown pipeline manager {kind!r}") from None
