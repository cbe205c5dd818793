"""Pipeline managers: how items move through a pipeline (Zuul's managers).

:mod:`scheduler.manager.base` holds the shared rules; each manager kind is a
small subclass. :func:`manager_class` picks one by the pipeline's ``manager``.
"""

from __future__ import annotations

from scheduler.manager.base import PipelineManager
from scheduler.manager.independent import IndependentManager

MANAGERS: dict[str, type[PipelineManager]] = {
    IndependentManager.kind: IndependentManager,
}


def manager_class(kind: str) -> type[PipelineManager]:
    try:
        return MANAGERS[kind]
    except KeyError:
        raise ValueError(f"unknown pipeline manager {kind!r}") from None
