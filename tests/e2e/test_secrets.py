"""Secrets driven as a user drives them: ``sluice encrypt``, a ``secret:`` in git, a gate.

While the job that uses the secret runs, every znode of the test's tree,
every Redis key (Celery's messages decoded from base64), the SQL database
and every worker's log are searched for the plaintext: it is only ever in
the job's private secrets file. The job's own output shows ``******``.
A pre-review pipeline refuses the job (its secret belongs to an untrusted
project), with the reason in the report.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
from pathlib import Path

import redis

from scheduler.zk.client import ZooKeeperClient, connect
from tests.e2e.system import SluiceSystem, dedent
from tests.fixtures.waiting import wait_until

PLAINTEXT = "s3cr3t-" + secrets.token_hex(12)

TENANT = """
- tenant:
    name: demo
    source:
      local:
        config-projects: [config]
        untrusted-projects: [app]
"""

CONFIG = {
    "zuul.d/pipelines.yaml": """
        - pipeline:
            name: check
            manager: independent
            trigger: {}
        - pipeline:
            name: gate
            manager: dependent
            post-review: true
            success:
              local:
                merge: true
        - job:
            name: base
            parent: null
            timeout: 120
        """,
}

APP = {
    ".zuul.yaml": """
        - job:
            name: unit
            run: ci/pass.sh
        - project:
            check:
              jobs: [unit]
            gate:
              jobs: [unit]
        """,
    "ci/pass.sh": "#!/bin/sh\nexit 0\n",
}

# The job checks the secret by its digest (the plaintext is never in git),
# prints it (the log must mask it) and waits for the test's scan.
DEPLOY = """#!/bin/sh
set -e
password=$(python3 -c 'import json, os
print(json.load(open(os.environ["SLUICE_SECRETS_FILE"]))["site"]["password"])')
test "$(printf %s "$password" | sha256sum | cut -d' ' -f1)" = "{digest}"
echo "deploying with $password"
touch {running}
while [ ! -e {release} ]; do sleep 0.1; done
"""


def _znodes(client: ZooKeeperClient, path: str = "/") -> list[tuple[str, bytes]]:
    found: list[tuple[str, bytes]] = []
    try:
        data, _ = client.get(path)
        children = client.get_children(path)
    except Exception:  # deleted while we walk
        return found
    found.append((path, data or b""))
    for child in children:
        found.extend(_znodes(client, f"{path.rstrip('/')}/{child}"))
    return found


def _redis_values(url: str) -> list[tuple[str, bytes]]:
    """Every value of every key; a kombu message's body decoded from base64 too."""
    db = redis.Redis.from_url(url)
    found: list[tuple[str, bytes]] = []
    for raw in db.scan_iter(count=1000):
        key = raw.decode(errors="replace")
        kind = db.type(raw).decode()
        values: list[bytes] = []
        if kind == "string":
            values = [db.get(raw) or b""]
        elif kind == "list":
            values = list(db.lrange(raw, 0, -1))
        elif kind == "hash":
            values = [b for pair in db.hgetall(raw).items() for b in pair]
        elif kind == "set":
            values = list(db.smembers(raw))
        elif kind == "zset":
            values = list(db.zrange(raw, 0, -1))
        for value in values:
            found.append((key, value))
            found.extend((f"{key} (body)", body) for body in _message_bodies(value))
    return found


def _message_bodies(value: bytes) -> list[bytes]:
    try:
        message = json.loads(value)
    except ValueError:
        return []
    if not isinstance(message, dict) or not isinstance(message.get("body"), str):
        return []
    if message.get("properties", {}).get("body_encoding") == "base64":
        return [base64.b64decode(message["body"])]
    return [message["body"].encode()]


def _leaks(system: SluiceSystem, client: ZooKeeperClient) -> list[str]:
    needle = PLAINTEXT.encode()
    znodes = _znodes(client)
    values = _redis_values(system.environment.redis_url)
    # the search did look: the key pair, the build request and Celery's keys are there
    assert any(p.startswith("/keystorage/") for p, _ in znodes), [p for p, _ in znodes]
    assert any(p.startswith("/executor/") for p, _ in znodes)
    assert any("celery" in k or "_kombu" in k or "unacked" in k for k, _ in values), values[:5]
    where = [f"znode {p}" for p, data in znodes if needle in data]
    where += [f"redis {k}" for k, v in values if needle in v]
    database = system.environment.state_dir / "sluice.db"
    if database.exists() and needle in database.read_bytes():
        where.append("the SQL database")
    where += [f"log of {w.node}" for w in system.started if PLAINTEXT in w.log_text()]
    return where


def test_a_secret_reaches_its_job_and_nothing_else(system: SluiceSystem, tmp_path: Path) -> None:
    system.config.write_text(
        system.config.read_text() + f"keystore:\n  password: {secrets.token_hex(16)}\n"
    )
    system.tenant(TENANT)
    system.repos.commit("config", "main", CONFIG)
    base = system.repos.commit("app", "main", APP)
    system.start_workers()
    system.sluice("reconfigure")

    plaintext_file = tmp_path / "password"
    plaintext_file.write_text(PLAINTEXT)
    secret_yaml = system.sluice(
        "encrypt",
        "--tenant",
        "demo",
        "--project",
        "app",
        "--secret-name",
        "creds",
        "--field-name",
        "password",
        "--infile",
        str(plaintext_file),
    )
    assert PLAINTEXT not in secret_yaml and "!encrypted/pkcs1-oaep" in secret_yaml
    running, release = tmp_path / "running", tmp_path / "release"
    digest = hashlib.sha256(PLAINTEXT.encode()).hexdigest()
    change = {
        ".zuul.yaml": secret_yaml
        + dedent(
            """
            - job:
                name: unit
                run: ci/pass.sh
            - job:
                name: deploy
                run: ci/deploy.sh
                secrets:
                  - name: site
                    secret: creds
            - project:
                check:
                  jobs: [unit, deploy]
                gate:
                  jobs: [unit, deploy]
            """
        ),
        "ci/deploy.sh": DEPLOY.format(digest=digest, running=running, release=release),
    }
    system.repos.commit("app", "deploy", change, base=base)
    system.enqueue("deploy", "gate")

    client = connect(system.environment.zookeeper.settings())
    try:
        try:
            wait_until(running.exists, timeout=90, what="the deploy job to run with its secret")
        except AssertionError:
            print(system.buildsets(), system.builds())
            for worker in system.started:
                print(worker.log_text()[-5000:])
            raise
        assert _leaks(system, client) == []
        release.touch()
        system.sluice("wait", "--idle", "--timeout", "120")
        assert _leaks(system, client) == []
    finally:
        client.stop()
        client.close()

    (buildset,) = system.buildsets()
    assert buildset["result"] == "SUCCESS", buildset
    logs = list((system.environment.state_dir).rglob("job-output.txt"))
    deploy_log = next(p for p in logs if "ci/deploy.sh" in p.read_text())
    assert "deploying with ******" in deploy_log.read_text()
    assert PLAINTEXT not in deploy_log.read_text()

    # check is a pre-review pipeline: the job with an untrusted project's secret may not run
    system.repos.commit(
        "app", "again", {"README": "x\n"}, base=system.repos.git("app", "rev-parse", "main")
    )
    system.enqueue("again", "check")
    system.sluice("wait", "--idle", "--timeout", "120")
    check = [b for b in system.buildsets() if b["pipeline"] == "check"]
    assert len(check) == 1 and check[0]["result"] != "SUCCESS", check
    assert "does not allow post-review job 'deploy'" in check[0]["message"], check
