"""A round model of ``bench/gating.py`` on the pure gate harness: what each policy costs.

The bench runs real workers; this model replays its gate with the
managers alone, in rounds: merges answer at once, ``slots`` builds run at
a time (the bench's executor has 4 processes), each build takes one round
and they start in the order they were asked for. A build fails when the
stack it tests holds a deterministic culprit, or a flaky one not yet seen
failing (its first build that ends fails, later ones pass), as in the
bench. What it counts: builds started (a reset's aborted ones included),
the round of the last push, and pushes of deterministic culprits (must be
none). The figures are rounds, so they are the same on every machine.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from scheduler.config.model import BatchConfig
from scheduler.manager.settings import PipelineSettings
from scheduler.model.item import MergeState
from scheduler.model.results import Result
from scheduler.wire.events import Enqueue
from tests.scheduler.gate_harness import Gate, change


@dataclass(frozen=True)
class Run:
    builds: int
    last_push: int
    merged: int
    merged_wrongly: int


def culprits(changes: int, rate: float, seed: int) -> tuple[set[str], set[str]]:
    """The deterministic and flaky failers, half of each (the bench's draw, seeded)."""
    drawn = random.Random(seed).sample(range(changes), round(rate * changes))
    flaky = len(drawn) // 2
    return {f"c{n}" for n in drawn[flaky:]}, {f"c{n}" for n in drawn[:flaky]}


def _answer_merges(g: Gate) -> None:
    while True:
        live = [i for i in g.state.items.values() if not i.dequeued]
        merging = [i for i in live if i.buildset.merge_state is MergeState.PENDING]
        if not merging:
            return
        g.run(*(g.stack_merge_event(i) for i in merging))


def run(
    rate: float, seed: int, batch: BatchConfig | None, changes: int = 40, slots: int = 4
) -> Run:
    deterministic, flaky = culprits(changes, rate, seed)
    unseen = set(flaky)
    settings = PipelineSettings(
        "gate", "dependent", merge_on_success=True, batch_for=lambda project, branch: batch
    )
    g = Gate(settings=settings)
    g.max_passes = 10 * changes
    g.run(*(Enqueue(change(f"c{n}")) for n in range(changes)))
    started = 0
    last_push = 0
    waiting: list[tuple[str, str, str]] = []  # (item, buildset, job) in the order asked
    running: list[tuple[str, str, str]] = []
    for round_ in range(1, 50 * changes):
        _answer_merges(g)
        ended = []
        for item_uuid, buildset_uuid, job in running:
            item = g.state.items.get(item_uuid)
            if item is None or item.dequeued or item.buildset.uuid != buildset_uuid:
                continue  # reset or gone: aborted
            stack = set(g.merged_on(item.change.ref))
            failed = bool(stack & deterministic or stack & unseen)
            unseen -= stack
            ended.append(g.build_event(item, job, Result.FAILURE if failed else Result.SUCCESS))
        running = []
        pushed = len(g.pushed)
        if ended:
            g.run(*ended)
        _answer_merges(g)
        if len(g.pushed) != pushed:
            last_push = round_
        live = [i for i in g.state.items.values() if not i.dequeued]
        if not live:
            break
        asked = [
            (i.uuid, i.buildset.uuid, job.name)
            for i in live
            if i.buildset.jobs
            for job in i.buildset.graph
            if job.running
        ]
        waiting = [key for key in waiting if key in asked]
        waiting += [key for key in asked if key not in waiting]
        running, waiting = waiting[:slots], waiting[slots:]
        started += len(running)
    else:
        raise AssertionError("the gate does not drain")
    wrongly = sum(1 for ref in g.pushed if ref in deterministic)
    return Run(started, last_push, len(g.pushed), wrongly)
