"""CPU per task send from a worker: Celery's ``send_task`` beside the fast way.

Starts a Redis of its own and sends a worker's most common message, a
pipeline nudge (``dispatch.send(PROCESS_PIPELINE, tenant, pipeline)``, as
after every build and merge), ``--sends`` times through each way, in
alternating rounds:

* Celery (``broker.fast_send: false``): ``send_task``, kombu's producer and
  retry policy, and the ``task-sent`` event;
* the fast way (``scheduler/nudge/kept_connection.py``): the same message ``LPUSH``ed
  with redis-py over the process's kept connection;
* the floor: redis-py's ``LPUSH`` of a ready-made message on a kept
  connection (what the fast way cannot do without).

Prints the median over the rounds of the sender's CPU per send (its process
time) and of Redis's (from its ``/proc`` stat, 10 ms ticks: hence many
sends a round), each with its ratio to the fast way. The sender runs as a
worker's pool process does (``task_join_will_block``): Celery then skips
subscribing to each task's result.

Run by hand (``.venv/bin/python bench/send.py``); ``--smoke`` runs it
small, as ``tests/bench/test_smoke.py`` does in CI.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis
from celery._state import _set_task_join_will_block

from bench._system import cpu_seconds
from cli.stack import process
from cli.stack.process import free_port
from cli.stack.redis import RedisServer
from scheduler.nudge import dispatch, envelope, task_names
from scheduler.settings.load import load_settings
from scheduler.settings.sections import Settings

QUEUE = "bench-send"


def sender(settings: Settings) -> Callable[[], object]:
    def send() -> object:
        return dispatch.send(
            task_names.PROCESS_PIPELINE, "demo", "check", settings=settings, queue=QUEUE
        )

    return send


def floor(client: redis.Redis) -> Callable[[], object]:
    message = envelope.task_message(
        task_names.PROCESS_PIPELINE, ["demo", "check"], {}, QUEUE, task_id=str(uuid.uuid4())
    )
    return lambda: client.lpush(QUEUE, message)


def measure(
    send: Callable[[], object], sends: int, redis_pid: int, client: redis.Redis
) -> tuple[float, float]:
    """Milliseconds of CPU per send: the sender's, Redis's."""
    for _ in range(20):  # connections made, caches warm
        send()
    redis_before, ours_before = cpu_seconds([redis_pid]), time.process_time()
    for _ in range(sends):
        send()
    ours, theirs = time.process_time() - ours_before, cpu_seconds([redis_pid]) - redis_before
    client.delete(QUEUE)
    return ours / sends * 1000, theirs / sends * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sends", type=int, default=5000, help="sends a round and a way")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--smoke", action="store_true", help="200 sends, 1 round (CI)")
    args = parser.parse_args()
    sends, rounds = (200, 1) if args.smoke else (args.sends, args.rounds)
    process.children_die_with_parent()
    _set_task_join_will_block(True)  # as in a worker's pool process
    with tempfile.TemporaryDirectory(prefix="sluice-bench-send-") as base:
        server = RedisServer(data_dir=Path(base) / "redis", port=free_port())
        server.start()
        try:
            server.wait_ready()
            assert server.proc_pid is not None
            client = redis.Redis.from_url(server.url)
            settings = replace(load_settings(environ={}), broker_url=server.url)
            ways = {
                "Celery send_task": sender(
                    replace(settings, broker=replace(settings.broker, fast_send=False))
                ),
                "fast way": sender(settings),
                "floor: LPUSH only": floor(client),
            }
            figures: dict[str, list[tuple[float, float]]] = {name: [] for name in ways}
            for _ in range(rounds):
                for name, send in ways.items():
                    figures[name].append(measure(send, sends, server.proc_pid, client))
        finally:
            server.stop()
    medians = {
        name: (statistics.median(f[0] for f in got), statistics.median(f[1] for f in got))
        for name, got in figures.items()
    }
    fast_ours, fast_redis = medians["fast way"]
    print(f"one pipeline nudge sent {sends} times a round, median of {rounds} rounds")
    print(f"  {'':20} {'sender ms':>10} {'x fast':>7} {'Redis ms':>9} {'x fast':>7}")
    for name, (ours, theirs) in medians.items():
        # too few sends for Redis's 10 ms ticks (--smoke): no ratio
        ratio = f"{theirs / fast_redis:7.2f}" if fast_redis else f"{'-':>7}"
        print(f"  {name:20} {ours:10.3f} {ours / fast_ours:7.2f} {theirs:9.3f} {ratio}")


if __name__ == "__main__":
    main()
