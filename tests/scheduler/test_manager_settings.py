"""What the gating managers take from the layout (pure: no ZooKeeper)."""

from __future__ import annotations

from scheduler.config import Layout
from scheduler.config.model import (
    Pipeline,
    ProjectConfig,
    ProjectPipeline,
    Queue,
    SourceContext,
    Window,
)
from scheduler.layouts.source import fail_fast, pipeline_settings
from scheduler.manager.window import WindowSettings

SOURCE = SourceContext("config", "main", "zuul.yaml", 1, True)


def stanza(project: str, queue: str | None = None, fail: bool | None = None) -> ProjectConfig:
    pipelines = (ProjectPipeline("gate", (), 1, fail_fast=fail),)
    return ProjectConfig(project, SOURCE, pipelines=pipelines, queue=queue)


def test_pipeline_settings_from_the_layout() -> None:
    gate = Pipeline(
        "gate",
        SOURCE,
        "dependent",
        reporters={"success": {"git": {"merge": True}}},
        window=Window(window=5, floor=2, decrease_type="linear"),
    )
    layout = Layout(
        "t",
        pipelines={"gate": gate},
        projects={
            "app": (stanza("app", queue="integrated"),),
            "lib": (stanza("lib", queue="integrated"),),
            "other": (stanza("other"),),
        },
        queues={"integrated": Queue("integrated", SOURCE, per_branch=True)},
    )
    settings = pipeline_settings(layout, gate)
    assert settings.manager == "dependent" and settings.merge_on_success
    assert settings.window == WindowSettings(5, 2, None, "linear", 1, "linear", 2)
    assert settings.queue_for("lib", "main") == ("integrated", True)
    assert settings.queue_for("other", "main") is None


def test_defaults_when_the_pipeline_sets_nothing() -> None:
    check = Pipeline("check", SOURCE, "independent", reporters={"success": {"git": {}}})
    settings = pipeline_settings(Layout("t", pipelines={"check": check}), check)
    assert settings.window == WindowSettings() and not settings.merge_on_success


def test_fail_fast_the_last_stanza_that_sets_it_wins() -> None:
    layout = Layout("t", projects={"app": (stanza("app", fail=True), stanza("app"))})
    assert fail_fast(layout, "app", "main", "gate")
    layout = Layout("t", projects={"app": (stanza("app", fail=True), stanza("app", fail=False))})
    assert not fail_fast(layout, "app", "main", "gate")
    assert not fail_fast(layout, "lib", "main", "gate")
