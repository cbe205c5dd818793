"""What a huge request body costs ``sluice web``'s memory, beside a 1 KB one in the same run.

Starts ``sluice web`` (the console script, over a ``sluice.yaml`` of its own
with an authenticator and a GitHub connection; no ZooKeeper or Redis is
needed: every request here is answered before the app would reach them)
and sends, over raw sockets (``tests/web/hostile.py``):

* the baseline, 1 KB bodies: an admin verb with a valid token (a 400 once
  the body is read and parsed) and a webhook with a wrong signature (a 401
  once the body is read and hashed);
* ``--megabytes`` (default 300) streamed in chunked encoding to each, and
  the same announced by ``Content-Length``.

For each, the web process's peak resident memory (``VmHWM``, started over
from its memory before the request) is printed, with its growth and the
ratio to the baseline's peak; the budget is a growth under 10 MB. Also
the body bytes the client got out before the answer, and the answer.
Smoke mode in CI (``tests/bench/test_smoke.py``): ``--megabytes 20``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import jwt

from cli.stack import process
from tests.web.hostile import RawAnswer, peak_rss, post_stream, reset_peak, rss

SECRET = "bench-secret-of-at-least-thirty-two-bytes"
CONFIG = f"""
state_dir: state
connections:
  github:
    driver: github
    baseurl: repos
    webhook_token: bench-webhook-secret
web:
  authenticators:
    - name: bench
      algorithm: HS256
      secret: {SECRET}
"""
ENQUEUE = "/api/tenant/demo/project/app/enqueue"
HOOK = "/api/connection/github/payload"
MB = 1024 * 1024
BUDGET = 10 * MB


def start_web(folder: Path) -> tuple[subprocess.Popen[bytes], str]:
    config = folder / "sluice.yaml"
    config.write_text(CONFIG)
    port = process.free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLUICE_")}
    sluice = str(Path(sys.executable).parent / "sluice")
    argv = [sluice, "--config", str(config), "web", "--listen", f"127.0.0.1:{port}"]
    with (folder / "web.log").open("w") as log:
        proc = subprocess.Popen(argv, env=env, cwd=folder, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 30
    while not process.port_open("127.0.0.1", port):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"sluice web did not start: {(folder / 'web.log').read_text()}")
        time.sleep(0.1)
    return proc, f"http://127.0.0.1:{port}"


def measured(pid: int, send: Callable[[], RawAnswer]) -> tuple[int, int, RawAnswer]:
    """The process's memory before ``send``, its peak during it, and the answer."""
    time.sleep(0.2)  # the previous request's connection closed, its buffers freed
    before = rss(pid)
    reset_peak(pid)
    answer = send()
    return before, peak_rss(pid), answer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=int, default=300)
    args = parser.parse_args()
    size = args.megabytes * MB
    token = jwt.encode(
        {"sub": "bench", "exp": int(time.time()) + 3600, "zuul": {"admin": ["demo"]}},
        SECRET,
        algorithm="HS256",
    )
    admin = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    hook = {"X-GitHub-Event": "push", "X-GitHub-Delivery": "b", "X-Hub-Signature-256": "sha256=0"}
    with tempfile.TemporaryDirectory(prefix="sluice-bench-web-") as folder:
        proc, url = start_web(Path(folder))
        try:
            cases: list[tuple[str, Callable[[], RawAnswer]]] = [
                ("1 KB to enqueue (baseline)", lambda: post_stream(url, ENQUEUE, admin, 1024)),
                ("1 KB to the webhook (baseline)", lambda: post_stream(url, HOOK, hook, 1024)),
                (
                    f"{args.megabytes} MB chunked to enqueue",
                    lambda: post_stream(url, ENQUEUE, admin, size),
                ),
                (
                    f"{args.megabytes} MB Content-Length to enqueue",
                    lambda: post_stream(url, ENQUEUE, admin, size, chunked=False),
                ),
                (
                    f"{args.megabytes} MB chunked to the webhook",
                    lambda: post_stream(url, HOOK, hook, size),
                ),
                (
                    f"{args.megabytes} MB Content-Length to the webhook",
                    lambda: post_stream(url, HOOK, hook, size, chunked=False),
                ),
            ]
            for _, send in cases[:2]:  # warm up: imports, first requests
                send()
            rows = [(label, *measured(proc.pid, send)) for label, send in cases]
        finally:
            proc.terminate()
            proc.wait(timeout=20)
    baseline = max(peak for _, _, peak, _ in rows[:2])
    print(f"sluice web, peak resident memory per request (budget: growth under {BUDGET // MB} MB)")
    columns = f"{'peak MB':>8} {'growth MB':>10} {'x base':>7} {'sent MB':>8}"
    print(f"  {'request':42} {columns}  answer")
    worst = 0
    for label, before, peak, answer in rows:
        grown = peak - before
        if "baseline" not in label:
            worst = max(worst, grown)
        print(
            f"  {label:42} {peak / MB:8.1f} {grown / MB:10.2f} {peak / baseline:7.2f}"
            f" {answer.sent / MB:8.1f}  {answer.status}"
        )
    verdict = "within" if worst < BUDGET else "OVER"
    print(f"largest growth {worst / MB:.2f} MB: {verdict} the {BUDGET // MB} MB budget")


if __name__ == "__main__":
    main()
