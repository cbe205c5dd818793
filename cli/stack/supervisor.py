"""The local stack's supervisor: a worker that dies is started again, with back-off.

``sluice stack up`` starts it (``python -m cli.stack.supervisor``) after the
workers answer. Once a second it looks at the stack file: a worker whose
process is gone is started again, after a back-off that doubles with each
death in a row (1 s, 2 s, 4 s ... at most 60 s) and starts over once a
worker has lived for a minute. Each restart is recorded in the stack file
(how many, when, how the process had ended: its exit status for a worker
the supervisor started itself, "gone" for one ``up`` started, whose
parent has exited), so ``sluice stack status``
says so, and in ``<state_dir>/logs/supervisor.log``. ``sluice stack down``
stops the supervisor first, so nothing it stops is started again.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import time
from dataclasses import dataclass, replace

from cli.stack.local import LocalStack, StackEntry, running
from cli.stack.workers import EXECUTOR_CONCURRENCY
from scheduler.settings.load import load_settings
from scheduler.settings.sections import Settings

log = logging.getLogger("sluice.supervisor")

POLL = 1.0
FIRST_DELAY = 1.0
MAX_DELAY = 60.0
# a worker that lived this long starts its back-off over
HEALTHY_AFTER = 60.0


@dataclass
class Watch:
    """What the supervisor remembers of one worker between looks."""

    delay: float = FIRST_DELAY
    died_at: float | None = None
    started_at: float = 0.0


def _exit_text(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"killed by {signal.Signals(os.WTERMSIG(status)).name}"
    return f"exit {os.WEXITSTATUS(status)}"


class Supervisor:
    def __init__(
        self,
        settings: Settings,
        worker_concurrency: int = 2,
        executor_concurrency: int = EXECUTOR_CONCURRENCY,
    ) -> None:
        self.stack = LocalStack(settings, worker_concurrency, executor_concurrency)
        self.watches: dict[str, Watch] = {}
        # pid -> how it ended, for the workers this process started (its children)
        self.exits: dict[int, str] = {}
        self.stopping = False

    def reap(self) -> None:
        """Collect the exit status of dead children (so they leave no zombies)."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            self.exits[pid] = _exit_text(status)

    def look(self, now: float) -> list[StackEntry]:
        """One look at the stack file; the workers restarted."""
        self.reap()
        restarted = []
        with self.stack.locked():
            components = self.stack.load()
            for name, entry in components.items():
                if entry.kind != "worker" or entry.pid is None:
                    continue
                watch = self.watches.setdefault(name, Watch(started_at=now))
                if running(entry):  # a pid now another process's is a death
                    if watch.died_at is None and now - watch.started_at >= HEALTHY_AFTER:
                        watch.delay = FIRST_DELAY
                    continue
                if watch.died_at is None:
                    watch.died_at = now
                    how = self.exits.get(entry.pid, "gone")
                    log.warning("%s (pid %s) died (%s)", name, entry.pid, how)
                if now - watch.died_at < watch.delay:
                    continue
                fresh = self.stack.start_worker(entry.queues)
                components[name] = replace(
                    fresh,
                    restarts=entry.restarts + 1,
                    restarted_at=time.time(),
                    last_exit=self.exits.pop(entry.pid, "gone"),
                )
                log.warning(
                    "%s started again (pid %s, restart %d, after %.0fs)",
                    name,
                    fresh.pid,
                    entry.restarts + 1,
                    watch.delay,
                )
                watch.delay = min(watch.delay * 2, MAX_DELAY)
                watch.died_at = None
                watch.started_at = now
                restarted.append(components[name])
            if restarted:
                self.stack.save(components)
        return restarted

    def run(self) -> None:
        signal.signal(signal.SIGTERM, self._stop)
        signal.signal(signal.SIGINT, self._stop)
        log.info("supervising the workers of %s", self.stack.stack_file)
        while not self.stopping:
            self.look(time.monotonic())
            time.sleep(POLL)
        log.info("stopped")

    def _stop(self, signum: int, _frame: object) -> None:
        self.stopping = True


def main() -> None:
    logging.basicConfig(
        level=logging.INFO, format="[%(asctime)s: %(levelname)s/supervisor] %(message)s"
    )
    concurrency = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    executors = int(sys.argv[2]) if len(sys.argv) > 2 else EXECUTOR_CONCURRENCY
    Supervisor(load_settings(), concurrency, executors).run()


if __name__ == "__main__":
    main()
