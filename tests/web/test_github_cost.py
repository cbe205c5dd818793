"""What a pull request costs GitHub, counted by the fake, on real workers.

A pull request's whole journey (opened and checked, approved, labelled,
gated, merged) costs at most :data:`BUDGET` API calls, with a personal
token and as a GitHub App (whose installation tokens are fetched once per
process, not once per call; the repository private, cloned with the
App's token). With a personal token, GitHub refuses check
runs (403): the check's status and comment are posted once each all the
same, and the refused check run is not asked again and again.
"""

from __future__ import annotations

from collections import Counter

from tests.e2e.system import SluiceSystem
from tests.fixtures.fake_github import FakeGitHub
from tests.fixtures.waiting import wait_until
from tests.web.test_github_journey import CONFIG, forge_system

# the bound for a change's journey through check and gate
BUDGET = 25


def journey(forge: FakeGitHub, system: SluiceSystem) -> None:
    pull = forge.open_pull("org/app", "fix", "Fix the thing")
    wait_until(lambda: "success" in forge.statuses_of(pull), 90, "the check", 0.5)
    system.sluice("wait", "--idle", "--timeout", "60")
    forge.approve(pull)
    forge.label(pull, "gate")
    wait_until(lambda: forge.merges, 90, "GitHub merged the pull request", 0.5)
    system.sluice("wait", "--idle", "--timeout", "60")
    check = [s["state"] for s in forge.statuses if s["context"] == "demo/check"]
    gate = [s["state"] for s in forge.statuses if s["context"] == "demo/gate"]
    assert (check, gate) == (["pending", "success"], ["success"])
    comments = [c["body"].splitlines()[0] for c in forge.comments]
    assert comments == ["Build succeeded (demo/check).", "Build succeeded (demo/gate)."]
    assert forge.unauthorized == 0


def spent(forge: FakeGitHub) -> str:
    return "\n".join(f"{n} {m} {p}" for (m, p), n in sorted(Counter(forge.calls).items()))


def test_a_journey_with_a_token_stays_in_budget_and_check_runs_refused_do_not_loop(
    system: SluiceSystem,
) -> None:
    with forge_system(system, CONFIG) as (forge, _web):
        journey(forge, system)
        assert forge.check_runs == []
        # refused once by GitHub; at most once more by the other worker process
        assert 1 <= forge.count("POST", "/check-runs$") <= 2
        assert len(forge.calls) <= BUDGET, spent(forge)


def test_a_journey_as_a_github_app_of_a_private_repository_stays_in_budget(
    system: SluiceSystem,
) -> None:
    with forge_system(system, CONFIG, app=True, private=True) as (forge, _web):
        journey(forge, system)
        # the repository is private: the merger fetched it with the installation token
        assert any(p.endswith("/git-upload-pack") for _, p in forge.git_requests)
        (run,) = forge.check_runs  # an App may write check runs
        assert (run["name"], run["conclusion"]) == ("demo/check", "success")
        # one installation token per worker process, each asked once
        assert 1 <= len(forge.installation_tokens) <= 2
        assert forge.count("POST", "/access_tokens$") == len(forge.installation_tokens)
        assert len(forge.calls) <= BUDGET, spent(forge)
