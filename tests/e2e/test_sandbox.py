"""Jobs in bubblewrap (the default ``executor.sandbox``): a job sees only its own build.

A job tries to read another build's workspace and ``sluice.yaml``, to write
outside its workspace, and to list other builds: every attempt is refused
(or finds nothing), while its own workspace, home and log folder stay
writable. (``/tmp`` is the job's own: a tmpfs.)
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.e2e.system import CHECK_CONFIG, TENANT_YAML, SluiceSystem


def test_a_job_sees_only_its_own_build(system: SluiceSystem) -> None:
    if shutil.which("bwrap") is None:
        pytest.fail("bubblewrap is not installed (make bootstrap installs it)")
    state = system.environment.state_dir
    planted = state / "builds" / "another-build" / "secret.txt"
    planted.parent.mkdir(parents=True)
    planted.write_text("another build's secret\n")
    probe = f"""#!/bin/sh
        leak=0
        cat {planted} 2>/dev/null && leak=1
        grep -q . {system.config} 2>/dev/null && {{ echo "read sluice.yaml"; leak=1; }}
        touch /var/tmp/sluice-probe 2>/dev/null  # its own tmpfs, not the host's
        touch /etc/sluice-probe 2>/dev/null && {{ echo "wrote /etc"; leak=1; }}
        others=$(ls {state}/builds 2>/dev/null | wc -l)
        [ "$others" -le 1 ] || {{ echo "sees $others builds"; leak=1; }}
        echo ok > "$HOME/own" && echo ok > "$TMPDIR/own" || leak=1
        echo ok > "$SLUICE_LOG_DIR/own" || leak=1
        echo "sandbox probe: leak=$leak"
        exit $leak
        """
    app = {
        ".zuul.yaml": """
            - job:
                name: probe
                run: ci/probe.sh
            - project:
                check:
                  jobs: [probe]
            """,
        "ci/probe.sh": probe,
    }
    system.tenant(TENANT_YAML)
    system.repos.commit("config", "main", CHECK_CONFIG)
    base = system.repos.commit("app", "main", app)
    system.repos.commit("app", "feature", {"f.txt": "x\n"}, base=base)
    system.start_workers()
    system.sluice("reconfigure")
    system.enqueue("feature")
    system.sluice("wait", "--idle", "--timeout", "90")
    (build,) = system.builds()
    log = (state / "logs" / build["uuid"] / "job-output.txt").read_text()
    assert build["result"] == "SUCCESS", log
    assert "sandbox probe: leak=0" in log
    assert not Path("/var/tmp/sluice-probe").exists() and not Path("/etc/sluice-probe").exists()
    assert "another build's secret" not in log
    assert not (state / "logs" / build["uuid"] / "missing").exists()
    assert (state / "logs" / build["uuid"] / "own").read_text() == "ok\n"  # its log folder
    assert planted.read_text() == "another build's secret\n"  # untouched
