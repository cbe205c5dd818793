"""Run one build from a spec file, outside Celery and ZooKeeper (for debugging).

``python -m workers.executor SPEC.json [--state-dir DIR]`` runs the build
whose params (a build request's: ``BuildSpec.to_dict()`` as JSON) are in
``SPEC.json``, streams nothing (follow the log path printed on stderr), and
prints the result as JSON on stdout. Ctrl-C (or SIGTERM) cancels the build, which then
ends ``ABORTED`` with its process tree gone. Exit status: 0 for SUCCESS,
1 for any other result, 2 for an unreadable spec.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from pathlib import Path
from types import FrameType

from scheduler.model.results import Result
from scheduler.wire.build_spec import BuildSpec
from workers.executor.control import LocalControl, StartedInfo
from workers.executor.errors import BuildSpecError
from workers.executor.runner import RunnerOptions, run_build


class _CliControl(LocalControl):
    def on_started(self, info: StartedInfo) -> None:
        super().on_started(info)
        print(f"log: {info.log_path}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workers.executor", description=__doc__)
    parser.add_argument("spec", type=Path, help="a build request's params as JSON")
    parser.add_argument("--state-dir", type=Path, default=Path(".sluice"))
    args = parser.parse_args(argv)
    try:
        spec = BuildSpec.from_json(args.spec.read_text())
    except (OSError, BuildSpecError) as exc:
        print(f"{args.spec}: {exc}", file=sys.stderr)
        return 2
    control = _CliControl()

    def cancel(signum: int, frame: FrameType | None) -> None:
        control.cancel()

    signal.signal(signal.SIGINT, cancel)
    signal.signal(signal.SIGTERM, cancel)
    result = run_build(spec, control, RunnerOptions(state_dir=args.state_dir.resolve()))
    print(json.dumps(result.to_dict(), indent=2))
    return 0 if result.result is Result.SUCCESS else 1


if __name__ == "__main__":
    sys.exit(main())
