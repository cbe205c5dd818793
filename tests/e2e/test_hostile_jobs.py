"""Hostile jobs on real workers: every attack a job of an untrusted change tries fails.

One change of an untrusted project runs, on a real executor with the
default sandbox (bubblewrap), as root as CI runs it:

* ``probe``: one script that tries each attack of :data:`ATTACKS` (read
  host files, other builds and repositories, the stack's secrets; replace
  its own log with a link; leave the sandbox through mounts, capabilities
  or a nested user namespace; reach ZooKeeper, Redis, the workers'
  processes and their environment, the host's Unix sockets and devices)
  and prints whether it reached it;
* ``thief``: a child of a trusted parent whose post-run holds a secret;
  its run step rewrites every copy of that post-run it can find, plants
  a ``.gitconfig`` in its home and leaves a daemon listening on its
  loopback (a fake agent or proxy), and the post-run must still be the
  genuine one, with a clean home, and find nothing listening;
* ``fork-bomb``, ``memory-hog`` and ``big-file``: each ends its own build
  at a limit (``executor.sandbox_limits``) while the executor goes on: a
  change checked afterwards passes.

The outcomes make the table of what a job can reach in docs/security.md:
the test fails when the table there differs from what it saw (run it with
``WRITE_SECURITY_TABLE=1`` to write the table after a change).
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
from pathlib import Path

import pytest

from tests.e2e.system import CHECK_CONFIG, SluiceSystem, dedent

ROOT = Path(__file__).resolve().parents[2]
SECURITY_DOC = ROOT / "docs" / "security.md"
TABLE_BEGIN = "<!-- hostile-jobs table: written by tests/e2e/test_hostile_jobs.py -->"
TABLE_END = "<!-- end of the hostile-jobs table -->"
PLAINTEXT = "trusted-" + secrets.token_hex(12)

TENANT = """
- tenant:
    name: demo
    source:
      local:
        config-projects: [config]
        untrusted-projects: [app]
"""

# A trusted parent (in the config project) whose post-run holds a secret.
PARENT = """
- job:
    name: publish-base
    post-run:
      - name: playbooks/publish.sh
    secrets:
      - name: creds
        secret: publish-creds
"""

PUBLISH = """#!/bin/sh
count=$(python3 -c 'import json, os
print(len(json.load(open(os.environ["SLUICE_SECRETS_FILE"]))["creds"]))')
echo "genuine post-run with $count secret field(s)"
test -e "$HOME/.gitconfig" && echo "HOME POISONED"
python3 -c 'import socket
try:
    print("post-run reached", socket.create_connection(("127.0.0.1", 47474), 2).recv(64))
except OSError:
    print("post-run: nothing on the loopback")'
exit 0
"""

# The untrusted child: overwrite every copy of the parent's post-run, poison HOME.
# Its own checkout of the config project (src/) is its to change; the copy
# the trusted post-run runs from (content/) is not.
THIEF = """#!/bin/sh
evil='#!/bin/sh\\necho STOLEN; cat "$SLUICE_SECRETS_FILE"\\n'
for f in $(find "$SLUICE_WORKSPACE" -name publish.sh 2>/dev/null); do
    case "$f" in */content/*) where=TRUSTED ;; *) where=own ;; esac
    printf "$evil" > "$f" 2>/dev/null && echo "$where REWROTE $f"
    chmod u+w "$f" 2>/dev/null && echo "$where CHMOD $f"
    mv "$(dirname "$f")" "$(dirname "$f").gone" 2>/dev/null && echo "$where MOVED $f"
done
mv "$SLUICE_WORKSPACE/content" "$SLUICE_WORKSPACE/gone" 2>/dev/null && echo "TRUSTED MOVED content"
ls "$SLUICE_WORKSPACE/secrets" 2>/dev/null | grep . && echo "SAW SECRETS"
printf '[core]\\n\\tpager = echo PAGER\\n' > "$HOME/.gitconfig"
mkdir -p "$SLUICE_WORKSPACE/step" 2>/dev/null
setsid python3 -c 'import socket
server = socket.create_server(("127.0.0.1", 47474))
while True:
    server.accept()[0].sendall(b"FAKE AGENT")' </dev/null >/dev/null 2>&1 &
sleep 1
python3 -c 'import socket
print("own", socket.create_connection(("127.0.0.1", 47474), 2).recv(64))' && echo "LISTENING"
echo "thief done"
exit 0
"""

# (key, what the job tries, shell that succeeds when the job reached it, expected)
ATTACKS: list[tuple[str, str, str, str]] = [
    ("shadow", "read `/etc/shadow`", "grep -q . /etc/shadow", "refused"),
    ("root-home", "list `/root`", "ls -A /root | grep -q .", "refused"),
    (
        "source-tree",
        "see Sluice's tree beyond its two packages (the demo's state, `sluice.yaml`)",
        "ls -A {source} | grep -qv -e '^.venv$' -e '^scheduler$' -e '^workers$'",
        "refused",
    ),
    ("sluice-yaml", "read the worker's `sluice.yaml`", "grep -q . {config}", "refused"),
    (
        "stack-secrets",
        "read the keystore and broker passwords in the state dir",
        "cat {state}/keystore.password {state}/broker.password | grep -q .",
        "refused",
    ),
    ("database", "read the SQL database", "grep -q . {state}/sluice.db", "refused"),
    (
        "other-builds",
        "list other builds' workspaces",
        "[ $(ls -A {builds} | wc -l) -gt 1 ]",
        "refused",
    ),
    (
        "other-repos",
        "read a repository of another project in the merger's cache",
        "cat {state}/git/local/private.git/SECRET | grep -q .",
        "refused",
    ),
    (
        "log-link",
        "replace its `job-output.txt` with a link to a host file",
        'ln -sfn /etc/hostname "$SLUICE_LOG_DIR/job-output.txt"',
        "refused",
    ),
    (
        "log-remove",
        "remove or rename its `job-output.txt`",
        'L="$SLUICE_LOG_DIR"; rm -f "$L/job-output.txt" || mv "$L/job-output.txt" "$L/x"',
        "refused",
    ),
    (
        "log-write",
        "write into `job-output.txt` past the executor",
        'echo forged >> "$SLUICE_LOG_DIR/job-output.txt"',
        "refused",
    ),
    ("umount", "`umount -l /tmp` to uncover the host's", "umount -l /tmp", "refused"),
    ("remount", "`mount -o remount,rw /`", "mount -o remount,rw /", "refused"),
    ("mount", "mount a file system of its own", "mount -t tmpfs none /mnt", "refused"),
    (
        "capabilities",
        "hold any capability",
        "grep CapEff /proc/self/status | grep -qv 0000000000000000",
        "refused",
    ),
    ("nested-userns", "become root of a nested user namespace", "unshare -U -r true", "refused"),
    ("write-usr", "write under `/usr`", "touch /usr/bin/sluice-hostile", "refused"),
    ("write-etc", "write under `/etc`", "touch /etc/sluice-hostile", "refused"),
    ("write-state", "write into the state dir", "touch {state}/sluice-hostile", "refused"),
    ("sysctl", "write a kernel setting", "echo hostile > /proc/sys/kernel/hostname", "refused"),
    (
        "zookeeper",
        "connect to the stack's ZooKeeper",
        "python3 -c 'import socket; socket.create_connection((\"{zk_host}\", {zk_port}), 2)'",
        "refused",
    ),
    (
        "redis",
        "connect to the stack's Redis",
        "python3 -c 'import socket; socket.create_connection((\"{redis_host}\", {redis_port}), 2)'",
        "refused",
    ),
    (
        "worker-environ",
        "read a worker's environment (`/proc/<pid>/environ`)",
        "cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n' | grep -q '^SLUICE_ZK_HOSTS='",
        "refused",
    ),
    (
        "worker-processes",
        "see (to signal or ptrace) a worker process",
        "cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' ' | grep -q 'cel[e]ry'",
        "refused",
    ),
    (
        "unix-sockets",
        "see the host's Unix sockets (abstract ones included)",
        "[ $(tail -n +2 /proc/net/unix | wc -l) -gt 0 ]",
        "refused",
    ),
    (
        "devices",
        "see a disk or memory device",
        "ls /dev | grep -q -e '^[sv]d' -e nvme -e '^mem$'",
        "refused",
    ),
    (
        "own-workspace",
        "write its own checkout and home",
        'touch "$SLUICE_SRC_DIR/x" "$HOME/x"',
        "reached",
    ),
    (
        "own-log-folder",
        "add a file of its own beside its log",
        'echo own > "$SLUICE_LOG_DIR/own.txt"',
        "reached",
    ),
    (
        "own-loopback",
        "serve and connect on its own loopback",
        'python3 -c \'import socket; s=socket.create_server(("127.0.0.1", 0)); '
        "socket.create_connection(s.getsockname(), 2)'",
        "reached",
    ),
]

# (key, what the job tries, expected outcome) of the jobs other than the probe
OTHER_ATTACKS = [
    (
        "trusted-post-run",
        "rewrite, chmod or move its trusted parent's post-run (which holds a secret)",
        "refused: the genuine post-run ran",
    ),
    ("poisoned-home", "plant a `.gitconfig` for the trusted post-run", "refused: a fresh HOME"),
    ("secrets-folder", "list the secrets folder from an untrusted step", "refused"),
    (
        "loopback-listener",
        "leave a daemon listening on its loopback (a fake agent or proxy) for the trusted post-run",
        "refused: the post-run's loopback is its own",
    ),
    ("fork-bomb", "fork without end (`processes: 64`)", "its build ends; the next change passes"),
    ("memory-hog", "allocate 2 GiB (`memory_mb: 512`)", "its build fails; the next change passes"),
    ("big-file", "write a 64 MiB file (`file_size_mb: 16`)", "its build fails (`SIGXFSZ`)"),
]


def probe_script(values: dict[str, str]) -> str:
    lines = ["#!/bin/sh", 'cd "$SLUICE_SRC_DIR" 2>/dev/null']
    for key, _what, reached, _expected in ATTACKS:
        test = reached.format(**values)
        lines.append(
            f"if ( {test} ) >/dev/null 2>&1; then echo 'HOSTILE {key} reached'; "
            f"else echo 'HOSTILE {key} refused'; fi"
        )
    lines.append("exit 0")
    return "\n".join(lines) + "\n"


def write_or_check_table(rows: list[tuple[str, str, str]]) -> None:
    """The table of docs/security.md between its markers: written, or compared."""
    table = ["| attack | what the job tries | outcome |", "| --- | --- | --- |"]
    table += [f"| `{key}` | {what} | {seen} |" for key, what, seen in rows]
    text = SECURITY_DOC.read_text()
    before, rest = text.split(TABLE_BEGIN, 1)
    _, after = rest.split(TABLE_END, 1)
    wanted = f"{before}{TABLE_BEGIN}\n" + "\n".join(table) + f"\n{TABLE_END}{after}"
    if os.environ.get("WRITE_SECURITY_TABLE") == "1":
        SECURITY_DOC.write_text(wanted)
        return
    assert text == wanted, "docs/security.md's table differs from what the jobs reached"


def test_hostile_jobs_reach_nothing_they_were_not_given(system: SluiceSystem) -> None:
    if shutil.which("bwrap") is None:
        pytest.fail("bubblewrap is not installed (make bootstrap installs it)")
    if os.geteuid() != 0:
        pytest.fail("the hostile-job suite runs as root, as CI does")
    env = system.environment
    state = env.state_dir
    state.mkdir(parents=True, exist_ok=True)
    for name in ("keystore.password", "broker.password"):
        (state / name).write_text("stack secret\n")
    private = state / "git" / "local" / "private.git"
    private.mkdir(parents=True)
    (private / "SECRET").write_text("another project's history\n")
    system.config.write_text(
        system.config.read_text()
        + f"keystore:\n  password: {secrets.token_hex(16)}\n"
        + "executor:\n  sandbox_limits:\n    processes: 64\n    memory_mb: 512\n"
        + "    file_size_mb: 16\n"
    )
    zk_host, zk_port = env.zookeeper.hosts.split(",")[0].rsplit(":", 1)
    redis = re.match(r"redis://(?:[^@]*@)?([^:/]+):(\d+)", env.redis_url)
    assert redis is not None
    values = {
        "source": str(ROOT),
        "config": str(system.config),
        "state": str(state),
        "builds": str(state / "builds"),
        "zk_host": zk_host,
        "zk_port": zk_port,
        "redis_host": redis.group(1),
        "redis_port": redis.group(2),
    }

    system.tenant(TENANT)
    system.repos.commit("config", "main", CHECK_CONFIG)
    base = system.repos.commit("app", "main", {"README": "app\n"})
    system.start_workers()
    system.sluice("reconfigure")
    plaintext = system.root / "plaintext"
    plaintext.write_text(PLAINTEXT)
    secret_yaml = system.sluice(
        "encrypt", "--tenant", "demo", "--project", "config", "--secret-name", "publish-creds",
        "--field-name", "token", "--infile", str(plaintext),
    )  # fmt: skip
    system.repos.commit(
        "config",
        "main",
        {
            **CHECK_CONFIG,
            "zuul.d/parent.yaml": secret_yaml + dedent(PARENT),
            "playbooks/publish.sh": PUBLISH,
        },
    )
    system.sluice("reconfigure")
    app = {
        ".zuul.yaml": """
            - job:
                name: probe
                run: ci/probe.sh
            - job:
                name: thief
                parent: publish-base
                run: ci/thief.sh
            - job:
                name: fork-bomb
                timeout: 15
                run: ci/fork-bomb.sh
            - job:
                name: memory-hog
                run: ci/memory-hog.sh
            - job:
                name: big-file
                run: ci/big-file.sh
            - job:
                name: canary
                run: ci/canary.sh
            - project:
                check:
                  jobs: [probe, thief, fork-bomb, memory-hog, big-file]
            """,
        "ci/probe.sh": probe_script(values),
        "ci/thief.sh": THIEF,
        "ci/fork-bomb.sh": "#!/bin/sh\nbomb() { bomb | bomb & }\nbomb\nsleep 60\n",
        "ci/memory-hog.sh": "#!/bin/sh\nexec python3 -c 'b = bytearray(2 << 30); print(len(b))'\n",
        "ci/big-file.sh": '#!/bin/sh\nhead -c 64M /dev/zero > "$HOME/big"\n',
        "ci/canary.sh": "#!/bin/sh\necho canary alive\n",
    }
    system.repos.commit("app", "hostile", app, base=base)
    system.enqueue("hostile")
    system.sluice("wait", "--idle", "--timeout", "240")

    builds = {b["job"]: b for b in system.builds()}
    logs = {job: Path(b["log_url"]).read_text() for job, b in builds.items() if b["log_url"]}
    rows: list[tuple[str, str, str]] = []

    # the probe: each attack as the job saw it
    probe = logs["probe"]
    assert builds["probe"]["result"] == "SUCCESS", probe
    for key, what, _reached, expected in ATTACKS:
        found = re.search(rf"HOSTILE {re.escape(key)} (\w+)", probe)
        assert found is not None, (key, probe)
        assert found.group(1) == expected, (key, found.group(1), probe)
        rows.append((key, what, found.group(1)))
    log_file = Path(builds["probe"]["log_url"])
    assert not log_file.is_symlink() and "forged" not in log_file.read_text()
    for planted in (Path("/usr/bin/sluice-hostile"), Path("/etc/sluice-hostile")):
        assert not planted.exists()
    assert not (state / "sluice-hostile").exists()

    # the trusted parent's post-run and its secret
    thief = logs["thief"]
    assert builds["thief"]["result"] == "SUCCESS", thief
    assert "genuine post-run with 1 secret field(s)" in thief, thief
    assert "own REWROTE" in thief  # it did try: its own checkout took the edit
    for word in ("STOLEN", "TRUSTED ", "SAW SECRETS", "HOME POISONED", "post-run reached"):
        assert word not in thief, (word, thief)
    assert PLAINTEXT not in thief
    assert "LISTENING" in thief and "post-run: nothing on the loopback" in thief, thief
    rows += [(key, what, expected) for key, what, expected in OTHER_ATTACKS[:4]]

    # the limits end their builds, never the executor
    assert builds["fork-bomb"]["result"] in ("TIMED_OUT", "FAILURE"), logs["fork-bomb"]
    assert builds["memory-hog"]["result"] == "FAILURE", logs["memory-hog"]
    assert "MemoryError" in logs["memory-hog"]
    assert builds["big-file"]["result"] == "FAILURE", logs["big-file"]
    assert "exit code 153" in logs["big-file"]  # 128 + SIGXFSZ
    system.repos.commit(
        "app",
        "after",
        {
            ".zuul.yaml": app[".zuul.yaml"].replace(
                "jobs: [probe, thief, fork-bomb, memory-hog, big-file]", "jobs: [canary]"
            )
        }
        | {k: v for k, v in app.items() if k != ".zuul.yaml"},
        base=base,
    )
    system.enqueue("after")
    system.sluice("wait", "--idle", "--timeout", "120")
    canary = [b for b in system.builds() if b["job"] == "canary"]
    assert [b["result"] for b in canary] == ["SUCCESS"]
    rows += [(key, what, expected) for key, what, expected in OTHER_ATTACKS[4:]]

    write_or_check_table(rows)
