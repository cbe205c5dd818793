"""Job ``attempts`` as Zuul's, on real workers (the git driver, no forge).

A pre-run failure is retried up to ``attempts`` and then RETRY_LIMIT; a
pre-run failure that passes on its second try succeeds; a pre-run failure
whose job writes ``{"zuul": {"retry": false}}`` (Zuul's ``zuul_return``)
is a FAILURE at once; a run failure and a post-run failure are reported
at once, without a retry.
"""

from __future__ import annotations

from collections import defaultdict

from tests.e2e.system import CHECK_CONFIG, TENANT_YAML, SluiceSystem

APP = {
    ".zuul.yaml": """
        - job:
            name: pre-fails
            attempts: 2
            pre-run: ci/fail.sh
            run: ci/pass.sh
        - job:
            name: pre-flaky
            pre-run: ci/once.sh
            run: ci/pass.sh
        - job:
            name: pre-vetoed
            pre-run: ci/veto.sh
            run: ci/pass.sh
        - job:
            name: run-fails
            run: ci/fail.sh
        - job:
            name: post-fails
            run: ci/pass.sh
            post-run: ci/fail.sh
        - project:
            check:
              jobs: [pre-fails, pre-flaky, pre-vetoed, run-fails, post-fails]
        """,
    "ci/pass.sh": "#!/bin/sh\nexit 0\n",
    "ci/fail.sh": "#!/bin/sh\necho broken\nexit 1\n",
    "ci/veto.sh": (
        '#!/bin/sh\necho \'{"zuul": {"retry": false}}\' > "$SLUICE_RESULT_FILE"\nexit 1\n'
    ),
}


def test_pre_run_failures_are_retried_run_and_post_run_failures_are_not(
    system: SluiceSystem,
) -> None:
    marker = system.root / "pre-flaky-ran"
    files = dict(APP)
    # fails on its first try only (the marker is left by the first)
    files["ci/once.sh"] = f"#!/bin/sh\ntest -e {marker} && exit 0\ntouch {marker}\nexit 1\n"
    system.tenant(TENANT_YAML)
    system.repos.commit("config", "main", CHECK_CONFIG)
    base = system.repos.commit("app", "main", files)
    system.repos.commit("app", "feature", {"README": "x\n"}, base=base)
    system.start_workers()
    system.sluice("reconfigure")
    system.enqueue("feature")
    system.sluice("wait", "--idle", "--timeout", "180")

    attempts: dict[str, list[str]] = defaultdict(list)
    for build in sorted(system.builds(), key=lambda b: (b["job"], b["attempt"])):
        attempts[build["job"]].append(build["result"])
    assert dict(attempts) == {
        "pre-fails": ["RETRY", "RETRY_LIMIT"],  # attempts: 2, both pre-run failures
        "pre-flaky": ["RETRY", "SUCCESS"],
        "pre-vetoed": ["FAILURE"],  # zuul_return retry: false
        "run-fails": ["FAILURE"],  # reported at once
        "post-fails": ["POST_FAILURE"],  # reported at once
    }
    (buildset,) = system.buildsets()
    assert buildset["result"] == "FAILURE"
    assert "pre-fails" in buildset["message"] and "pre-flaky" not in buildset["message"]
