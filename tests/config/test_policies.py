"""The layout-building policies: last good files for a broken branch, speculative layouts."""

from __future__ import annotations

from scheduler.config import BranchKey, UnparsedBranch, last_good_layout, speculative_layout
from scheduler.config.graph import freeze_job_graph
from tests.config.builders import BASE, dedent, tenant

GOOD = "- job: {name: unit}\n- project: {check: {jobs: [unit]}}\n"
BROKEN = "- job: {name: unit, timeout: soon}\n- project: {check: {jobs: [unit]}}\n"


def branches(app_text: str) -> list[UnparsedBranch]:
    return [
        UnparsedBranch("config", "master", {"zuul.yaml": dedent(BASE)}),
        UnparsedBranch("app", "main", {".zuul.yaml": app_text}),
    ]


def test_broken_branch_keeps_its_last_good_config() -> None:
    last_good = {BranchKey("git", "app", "main"): branches(GOOD)[1]}
    outcome = last_good_layout(tenant(), branches(BROKEN), last_good)
    assert [k.key for k in outcome.kept] == [BranchKey("git", "app", "main")]
    assert (outcome.kept[0].project, outcome.kept[0].branch) == ("app", "main")
    assert [str(e) for e in outcome.kept[0].errors] == [
        ".zuul.yaml:1: job 'unit': timeout: expected an integer, got string",
        # the project stanza now names a job that is gone
        ".zuul.yaml:2: project 'app': job 'unit' is not defined",
    ]
    assert outcome.result.errors == ()
    assert freeze_job_graph(outcome.result.layout, "app", "main", "check").names == ("unit",)


def test_good_update_is_taken() -> None:
    newer = "- job: {name: unit, timeout: 60}\n- project: {check: {jobs: [unit]}}\n"
    last_good = {BranchKey("git", "app", "main"): branches(GOOD)[1]}
    outcome = last_good_layout(tenant(), branches(newer), last_good)
    assert outcome.kept == ()
    assert freeze_job_graph(outcome.result.layout, "app", "main", "check").jobs[0].timeout == 60


def test_a_branch_is_keyed_by_its_connection_too() -> None:
    # the key of the config cache: a branch of the same name elsewhere is another branch
    assert tenant().branch_key("app", "main") == BranchKey("git", "app", "main")
    assert tenant().branch_key("stranger", "main") == BranchKey("", "stranger", "main")
    elsewhere = {BranchKey("github", "app", "main"): branches(GOOD)[1]}
    outcome = last_good_layout(tenant(), branches(BROKEN), elsewhere)
    assert outcome.kept == () and outcome.result.errors  # no last good of its own: taken


def test_change_with_broken_config_gets_the_error() -> None:
    proposed = [UnparsedBranch("app", "main", {".zuul.yaml": BROKEN})]
    speculative = speculative_layout(tenant(), branches(GOOD), proposed)
    assert [e.describe() for e in speculative.errors] == [
        "app@main: .zuul.yaml:1: job 'unit': timeout: expected an integer, got string",
        "app@main: .zuul.yaml:2: project 'app': job 'unit' is not defined",
    ]


def test_change_is_not_blamed_for_existing_errors() -> None:
    old_broken = GOOD + "- job: {name: other, voting: maybe}\n"
    proposed_text = "# a comment moves every line\n" + old_broken
    proposed = [UnparsedBranch("app", "main", {".zuul.yaml": proposed_text})]
    speculative = speculative_layout(tenant(), branches(old_broken), proposed)
    assert speculative.errors == ()
    assert len(speculative.result.errors) == 1
