"""Parsing of ``pipeline:`` objects (config projects only).

Triggers, reporters and ``require``/``reject`` name connections from
``sluice.yaml``; what each may contain depends on the connection's driver.
Keys are checked for the drivers Sluice has (git, timer, github, gitlab);
the values are kept as plain JSON for the drivers to interpret.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from scheduler.config.model import (
    MANAGERS,
    PRECEDENCES,
    BatchConfig,
    Pipeline,
    SourceContext,
    Window,
)
from scheduler.config.schema import Fields, Where, type_name
from scheduler.config.yamlload import MarkedDict

MESSAGE_KEYS = (
    "start-message",
    "success-message",
    "failure-message",
    "merge-conflict-message",
    "enqueue-message",
    "dequeue-message",
    "no-jobs-message",
    "footer-message",
)
REPORTER_ACTIONS = (
    "start",
    "success",
    "failure",
    "merge-conflict",
    "enqueue",
    "dequeue",
    "no-jobs",
    "config-error",
    "disabled",
)
# Zuul's older names, read as the new ones (giving both is an error)
OLD_NAMES = {
    "merge-failure": "merge-conflict",
    "merge-failure-message": "merge-conflict-message",
}
WINDOW_KEYS = (
    "window",
    "window-floor",
    "window-ceiling",
    "window-increase-type",
    "window-increase-factor",
    "window-decrease-type",
    "window-decrease-factor",
)
PIPELINE_KEYS = frozenset(
    {
        "name",
        "description",
        "manager",
        "precedence",
        "dequeue-on-new-patchset",
        "supercedes",
        "post-review",
        "trigger",
        "require",
        "reject",
        "batch",
        "pending-failure-depth",
        "failure-verdict",
        "disable-after-consecutive-failures",
        *OLD_NAMES,
        *MESSAGE_KEYS,
        *REPORTER_ACTIONS,
        *WINDOW_KEYS,
    }
)

TRIGGER_KEYS: Mapping[str, frozenset[str]] = {
    "git": frozenset({"event", "ref", "branch", "ignore-deletes"}),
    "timer": frozenset({"time", "dereference"}),
    "github": frozenset(
        {
            "event",
            "action",
            "branch",
            "ref",
            "comment",
            "label",
            "unlabel",
            "state",
            "status",
            "check",
            "require",
            "reject",
        }
    ),
    "gitlab": frozenset(
        {"event", "action", "branch", "ref", "comment", "labels", "unlabels", "require", "reject"}
    ),
}
TRIGGER_EVENTS: Mapping[str, frozenset[str]] = {
    "git": frozenset({"ref-updated"}),
    "github": frozenset({"pull_request", "pull_request_review", "push", "check_run", "status"}),
    "gitlab": frozenset({"gl_merge_request", "gl_push"}),
}
# the options of a forge's reporter, and Zuul's that Sluice does not support yet
REPORTER_KEYS: Mapping[str, frozenset[str]] = {
    "github": frozenset({"status", "check", "comment", "merge", "label", "unlabel"}),
    "gitlab": frozenset({"status", "comment", "merge", "label", "unlabel"}),
}
REPORTER_UNSUPPORTED: Mapping[str, frozenset[str]] = {
    "github": frozenset({"status-url", "review", "review-body"}),
    "gitlab": frozenset({"approval"}),
}
GITHUB_STATES = ("pending", "success", "failure", "error")
REQUIRE_KEYS: Mapping[str, frozenset[str]] = {
    "github": frozenset(
        {"open", "merged", "current-patchset", "draft", "status", "review", "label"}
    ),
    "gitlab": frozenset({"open", "merged", "approved", "labels"}),
}


def parse_pipeline(
    data: MarkedDict, where: Where, source: SourceContext, drivers: Mapping[str, str]
) -> Pipeline:
    name = data.get("name")
    subject = f"pipeline {name!r}" if isinstance(name, str) else "pipeline"
    fields = Fields(data, where, subject, PIPELINE_KEYS)
    fields.check_keys()
    name = fields.name()
    manager = fields.choice("manager", MANAGERS, None)
    if manager is None:
        raise fields.error(None, f"'manager' is required (one of: {', '.join(MANAGERS)})")
    return Pipeline(
        name=name,
        source=source,
        manager=manager,
        description=fields.string("description", "") or "",
        precedence=fields.choice("precedence", PRECEDENCES, "normal") or "normal",
        dequeue_on_new_patchset=fields.boolean("dequeue-on-new-patchset", True),
        supercedes=fields.string_list("supercedes") or (),
        post_review=fields.boolean("post-review", False),
        trigger=_triggers(fields, drivers),
        reporters=_reporters(fields, drivers),
        require=_requirements(fields, "require", drivers),
        reject=_requirements(fields, "reject", drivers),
        window=_window(fields, manager),
        messages=_messages(fields),
        disable_after=fields.integer("disable-after-consecutive-failures", minimum=1),
        batch=_batch(fields, manager),
        pending_failure_depth=_pending_failure_depth(fields, manager) or 0,
        failure_verdict=_failure_verdict(fields, manager),
    )


def _connection(fields: Fields, key: str, name: Any, drivers: Mapping[str, str]) -> str:
    if not isinstance(name, str) or name not in drivers:
        known = ", ".join(sorted(drivers)) or "none"
        raise fields.error(key, f"{name!r} is not a known connection (known: {known})")
    return drivers[name]


def _triggers(fields: Fields, drivers: Mapping[str, str]) -> dict[str, tuple[dict[str, Any], ...]]:
    trigger = fields.mapping("trigger")
    if trigger is None:
        return {}
    result: dict[str, tuple[dict[str, Any], ...]] = {}
    for conn, value in trigger.items():
        driver = _connection(fields, "trigger", conn, drivers)
        filters = [value] if isinstance(value, MarkedDict) else value
        if not isinstance(filters, list):
            raise fields.error(
                "trigger", f"{conn}: expected a list of event filters, got {type_name(filters)}"
            )
        result[conn] = tuple(_event_filter(fields, conn, driver, item) for item in filters)
    return result


def _event_filter(fields: Fields, conn: str, driver: str, item: Any) -> dict[str, Any]:
    if not isinstance(item, MarkedDict):
        raise fields.error(
            "trigger", f"{conn}: expected an event filter mapping, got {type_name(item)}"
        )
    allowed = TRIGGER_KEYS.get(driver)
    sub = Fields(
        item, fields.where, fields.subject, allowed or set(item), prefix=f"trigger.{conn}."
    )
    sub.check_keys()
    if driver == "timer" and sub.string("time") is None:
        raise sub.error(None, f"trigger {conn}: a timer trigger needs 'time'")
    events = TRIGGER_EVENTS.get(driver)
    if events is not None:
        names = sub.string_list("event")
        if not names:
            raise sub.error(None, f"trigger {conn}: 'event' is required")
        for event in names:
            if event not in events:
                raise sub.error("event", f"{event!r} is not one of: {', '.join(sorted(events))}")
    plain: dict[str, Any] = sub.json_mapping()
    return plain


def _named(fields: Fields, key: str) -> str | None:
    """The key a value of ``key`` is given under: its own or Zuul's older name."""
    old = [name for name, new in OLD_NAMES.items() if new == key and fields.has(name)]
    if old and fields.has(key):
        raise fields.error(old[0], f"give either '{key}' or its older name '{old[0]}', not both")
    if old:
        return old[0]
    return key if fields.has(key) else None


def _reporters(fields: Fields, drivers: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    result: dict[str, dict[str, Any]] = {}
    for action in REPORTER_ACTIONS:
        key = _named(fields, action)
        value = None if key is None else fields.mapping(key)
        if key is None or value is None:
            continue
        for conn, options in value.items():
            driver = _connection(fields, key, conn, drivers)
            _reporter_options(fields, key, conn, driver, options)
        result[action] = fields.json(key)
    return result


def _reporter_options(fields: Fields, key: str, conn: str, driver: str, options: Any) -> None:
    """A forge reporter's options: Zuul's keys, ``label``/``unlabel`` names, a GitHub state."""
    allowed = REPORTER_KEYS.get(driver)
    if allowed is None or options is None:
        return
    if not isinstance(options, MarkedDict):
        raise fields.error(key, f"{conn}: expected a mapping of options, got {type_name(options)}")
    for name in options:
        if name in REPORTER_UNSUPPORTED[driver]:
            raise fields.error(key, f"{conn}: '{name}' is not supported by Sluice yet")
        if name not in allowed:
            known = ", ".join(sorted(allowed))
            raise fields.error(key, f"{conn}: unknown reporter option {name!r} (known: {known})")
    for name in ("label", "unlabel"):
        labels = options.get(name, [])
        labels = [labels] if isinstance(labels, str) else labels
        if not isinstance(labels, list) or not all(isinstance(x, str) and x for x in labels):
            raise fields.error(key, f"{conn}: '{name}' must be a label name or a list of them")
    status = options.get("status")
    if driver == "github" and status is not None and status not in GITHUB_STATES:
        raise fields.error(
            key, f"{conn}: status {status!r} is not one of: {', '.join(GITHUB_STATES)}"
        )


def _messages(fields: Fields) -> dict[str, str]:
    found: dict[str, str] = {}
    for key in MESSAGE_KEYS:
        given = _named(fields, key)
        if given is not None and (value := fields.string(given)):
            found[key] = value
    return found


def _requirements(
    fields: Fields, key: str, drivers: Mapping[str, str]
) -> dict[str, dict[str, Any]]:
    value = fields.mapping(key)
    if value is None:
        return {}
    for conn, body in value.items():
        driver = _connection(fields, key, conn, drivers)
        allowed = REQUIRE_KEYS.get(driver)
        if allowed is None:
            raise fields.error(key, f"{driver} connection {conn!r} has no {key} filters")
        if not isinstance(body, MarkedDict):
            raise fields.error(key, f"{conn}: expected a mapping, got {type_name(body)}")
        Fields(body, fields.where, fields.subject, allowed, prefix=f"{key}.{conn}.").check_keys()
    result: dict[str, dict[str, Any]] = fields.json(key)
    return result


def _window(fields: Fields, manager: str) -> Window | None:
    given = [key for key in WINDOW_KEYS if fields.has(key)]
    if manager != "dependent":
        if given:
            raise fields.error(given[0], "window settings apply only to dependent pipelines")
        return None
    types = ("linear", "exponential")
    default = Window()
    window = Window(
        window=_int(fields, "window", default.window, 0),
        floor=_int(fields, "window-floor", default.floor, 1),
        ceiling=fields.integer("window-ceiling", minimum=1),
        increase_type=fields.choice("window-increase-type", types, default.increase_type) or "",
        increase_factor=_int(fields, "window-increase-factor", default.increase_factor, 1),
        decrease_type=fields.choice("window-decrease-type", types, default.decrease_type) or "",
        decrease_factor=_int(fields, "window-decrease-factor", default.decrease_factor, 1),
    )
    if window.ceiling is not None and window.ceiling < window.floor:
        raise fields.error("window-ceiling", f"must be at least window-floor ({window.floor})")
    return window


def _batch(fields: Fields, manager: str) -> BatchConfig | None:
    if fields.has("batch") and manager != "dependent":
        raise fields.error("batch", "batches apply only to dependent pipelines")
    return batch_of(fields)


def _pending_failure_depth(fields: Fields, manager: str) -> int | None:
    if fields.has("pending-failure-depth") and manager != "dependent":
        raise fields.error(
            "pending-failure-depth", "a pending failure applies only to dependent pipelines"
        )
    return fields.integer("pending-failure-depth", minimum=0)


def _failure_verdict(fields: Fields, manager: str) -> bool:
    if fields.has("failure-verdict") and manager != "dependent":
        raise fields.error("failure-verdict", "failure verdicts apply only to dependent pipelines")
    return fields.boolean("failure-verdict", False)


def batch_of(fields: Fields) -> BatchConfig | None:
    """``batch: {size: N, max-wait: S, max-bisect-depth: D}`` of a pipeline or a queue."""
    sub = fields.sub("batch", ("size", "max-wait", "max-bisect-depth"))
    if sub is None:
        return None
    default = BatchConfig()
    wait = sub.number("max-wait")
    return BatchConfig(
        size=_int(sub, "size", default.size, 1),
        max_wait=default.max_wait if wait is None else wait,
        max_bisect_depth=_int(sub, "max-bisect-depth", default.max_bisect_depth, 0),
    )


def _int(fields: Fields, key: str, default: int, minimum: int) -> int:
    value = fields.integer(key, minimum=minimum)
    return default if value is None else value
