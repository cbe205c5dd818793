"""The stdout callback of playbook steps: plain lines for ``job-output.txt``.

Loaded by Ansible from this folder (``stdout_callback = sluice_log``); it
imports nothing of Sluice. Each line is written and flushed as the event
happens, so the job log shows a task when it starts, not when the playbook
ends (the runner stamps each line and labels it with the phase)::

    PLAY [deploy]
    TASK [run the tests]
    node1 | the command's stdout, line by line
    node1 | stderr: what it wrote on stderr
    node1 | changed (rc=0)
    TASK [show a value]
    localhost | ok: hello
    PLAY RECAP
    node1 | ok=2 changed=1 unreachable=0 failed=0 skipped=0 rescued=0 ignored=0

Failures say ``FAILED``, unreachable hosts ``UNREACHABLE``, with Ansible's
message; a ``debug`` task's message or variable is shown on its result line.

An unreachable host's name is also appended to the file named by
``SLUICE_UNREACHABLE_FILE``: ansible-playbook exits 4 both for an
unreachable host and for a playbook that does not parse, and only the
first makes the runner retry the build.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from ansible.plugins.callback import CallbackBase  # type: ignore[import-untyped]

DOCUMENTATION = """
    name: sluice_log
    type: stdout
    short_description: Sluice's job log (plain lines, prefixed by host)
    description:
        - Each task as it starts, each host's result as it ends with the
          stdout and stderr lines of command and shell tasks, and a recap.
"""

# keys of a result shown as output lines, in this order
_OUTPUT_KEYS = (("stdout_lines", ""), ("stderr_lines", "stderr: "))
_STATS = ("ok", "changed", "unreachable", "failures", "skipped", "rescued", "ignored")


class CallbackModule(CallbackBase):  # type: ignore[misc]
    """Ansible's stdout callback; the class name is the one Ansible looks for."""

    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "stdout"
    CALLBACK_NAME = "sluice_log"

    def _emit(self, text: str) -> None:
        for line in text.splitlines() or [""]:
            sys.stdout.write(line + "\n")
        sys.stdout.flush()

    # -- plays and tasks ---------------------------------------------------

    def v2_playbook_on_play_start(self, play: Any) -> None:
        name = play.get_name().strip()
        self._emit(f"PLAY [{name}]")

    def v2_playbook_on_task_start(self, task: Any, is_conditional: bool) -> None:
        self._emit(f"TASK [{task.get_name().strip()}]")

    def v2_playbook_on_handler_task_start(self, task: Any) -> None:
        self._emit(f"HANDLER [{task.get_name().strip()}]")

    def v2_playbook_on_no_hosts_matched(self) -> None:
        self._emit("no hosts matched")

    def v2_playbook_on_stats(self, stats: Any) -> None:
        self._emit("PLAY RECAP")
        for host in sorted(stats.processed):
            counts = stats.summarize(host)
            numbers = " ".join(
                f"{'failed' if key == 'failures' else key}={counts.get(key, 0)}" for key in _STATS
            )
            self._emit(f"{host} | {numbers}")

    # -- results -----------------------------------------------------------

    def v2_runner_on_ok(self, result: Any) -> None:
        self._result(result, "changed" if result._result.get("changed") else "ok")

    def v2_runner_on_failed(self, result: Any, ignore_errors: bool = False) -> None:
        self._result(result, "FAILED (ignored)" if ignore_errors else "FAILED")

    def v2_runner_on_unreachable(self, result: Any) -> None:
        self._result(result, "UNREACHABLE")
        record = os.environ.get("SLUICE_UNREACHABLE_FILE")
        if record:
            with open(record, "a", encoding="utf-8") as handle:
                handle.write(f"{_host(result)}\n")

    def v2_runner_on_skipped(self, result: Any) -> None:
        self._emit(f"{_host(result)} | skipped")

    def v2_runner_item_on_ok(self, result: Any) -> None:
        self._result(result, "changed" if result._result.get("changed") else "ok", item=True)

    def v2_runner_item_on_failed(self, result: Any) -> None:
        self._result(result, "FAILED", item=True)

    def v2_runner_item_on_skipped(self, result: Any) -> None:
        self._emit(f"{_host(result)} | skipped: {self._item(result)}")

    def v2_runner_retry(self, result: Any) -> None:
        data = result._result
        left = data.get("retries", 0) - data.get("attempts", 0)
        self._emit(f"{_host(result)} | retrying ({left} retries left)")

    def _result(self, result: Any, status: str, item: bool = False) -> None:
        host, data = _host(result), result._result
        for key, prefix in _OUTPUT_KEYS:
            for line in data.get(key) or ():
                self._emit(f"{host} | {prefix}{line}")
        words = [status]
        if item:
            words.append(f"item={self._item(result)}")
        if "rc" in data:
            words.append(f"(rc={data['rc']})")
        message = _message(result, data, status)
        self._emit(f"{host} | {' '.join(words)}{': ' + message if message else ''}")

    def _item(self, result: Any) -> str:
        return str(self._get_item_label(result._result))


def _host(result: Any) -> str:
    delegated = result._result.get("_ansible_delegated_vars", {}).get("ansible_host")
    name = str(result._host.get_name())
    return f"{name} -> {delegated}" if delegated else name


def _message(result: Any, data: dict[str, Any], status: str) -> str:
    """What a result line says after the status: a debug message, or why it failed."""
    if result._task.action in ("debug", "ansible.builtin.debug"):
        if "msg" in data:
            return _text(data["msg"])
        shown = {k: v for k, v in data.items() if not k.startswith("_") and k != "changed"}
        return _text(shown)
    if status not in {"ok", "changed"} and data.get("msg"):
        return _text(data["msg"])
    return ""


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, default=str)
