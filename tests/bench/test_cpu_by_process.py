"""bench/cpu_by_process.py: perf's samples given to roles by process ancestry.

The script itself needs perf and root (run by hand); its attribution is
checked here on the text ``perf script --show-task-events`` prints.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from cpu_by_process import attribute, timeline

WORKER = "/venv/bin/python -m celery -A tasks worker -Q {} -n w@h --concurrency 4"
PROCESSES = {
    100: (1, WORKER.format("executor")),
    101: (100, WORKER.format("executor")),
    102: (101, "/venv/bin/python -I -S /src/workers/executor/zygote.py 101 7"),
    200: (1, WORKER.format("merger,maintenance")),
    201: (200, WORKER.format("merger,maintenance")),
    300: (1, "java -cp zookeeper.jar org.apache.zookeeper.server.quorum.QuorumPeerMain"),
}
# reaper 500 forked by the zygote, bwrap 501 by the reaper, the job 502 by
# bwrap; git 600 by the merger's pool process; a process of no known tree
PERF_SCRIPT = """
         python   102 PERF_RECORD_FORK(500:500):(102:102)
         python   500 PERF_RECORD_FORK(501:501):(500:500)
          bwrap   501 PERF_RECORD_FORK(502:502):(501:501)
         python   201 PERF_RECORD_FORK(600:600):(201:201)
         python   101
         python   101
         python   100
         python   500
          bwrap   501
          bwrap   501
           true   502
            git   600
   SyncThread:0   300
        swapper     0
      kworker/0   77
"""


def test_samples_go_to_the_worker_role_and_the_child_below_it() -> None:
    by_role, total = attribute(PERF_SCRIPT, PROCESSES)
    assert total == 11
    assert by_role == {
        "executor worker, pool": 2,
        "executor worker, main": 1,
        "step zygote > python": 1,
        "step zygote > bwrap": 2,
        "step zygote > true": 1,
        "merger worker, pool > git": 1,
        "ZooKeeper": 1,
        "idle": 1,
        "other: kworker/0": 1,
    }


# the same processes with perf's time field (``-F comm,pid,time``), seconds
TIMED = """
         python   102 100.000100: PERF_RECORD_FORK(500:500):(102:102)
         python   500 100.000200: PERF_RECORD_FORK(501:501):(500:500)
         python   101 100.010000:
          bwrap   501 100.020000:
        swapper     0 100.030000:
            git   600 100.060000:
         python   201 100.070000:
   SyncThread:0   300 100.080000:
      kworker/0    77 100.081000:
         python   101 100.200000:
"""


def test_a_timeline_buckets_the_window_and_folds_children_into_their_worker() -> None:
    buckets = timeline(TIMED, PROCESSES, (100.0, 100.1), 0.05)
    assert len(buckets) == 2
    assert buckets[0] == {"executor worker, pool": 1, "step zygote": 1, "idle": 1}
    # git 600 has no known parent here: not the merger's (no fork event), so "other"
    assert buckets[1] == {"other": 2, "merger worker, pool": 1, "ZooKeeper": 1}
    assert sum(sum(b.values()) for b in buckets) == 7  # the sample at 100.2 is outside
