"""Workspaces: checkouts at the repo state's commits, removal, hold, refused paths."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from scheduler.config.model import Playbook
from tests.executor.helpers import Repo, git, make_spec, playbook
from workers.executor import BaseControl, LocalControl, Result, RunnerOptions, run_build
from workers.executor.recycle import spare_of
from workers.executor.workspace import loose_commits

SHOW_CHECKOUTS = """
for p in org/project org/lib; do
  dir="$SLUICE_SRC_DIR/$p"
  echo "$p $(git -C "$dir" rev-parse HEAD) $(git -C "$dir" branch --show-current)"
done > "$SLUICE_LOG_DIR/checkouts"
lib="$SLUICE_SRC_DIR/org/lib"
git -C "$lib" branch --format='%(refname:short) %(objectname)' > "$SLUICE_LOG_DIR/lib-branches"
git -C "$lib" remote > "$SLUICE_LOG_DIR/lib-remotes"
"""


@pytest.mark.parametrize("lib_url", [False, True], ids=["lib-from-path", "lib-from-file-url"])
def test_projects_checked_out_at_repo_state(
    repo: Repo, tmp_path: Path, options: RunnerOptions, lib_url: bool
) -> None:
    repo.script("run.sh", SHOW_CHECKOUTS)
    repo.commit()
    project_commit = repo.dangling_commit()  # the merger's speculative merge
    lib = Repo.create(tmp_path / "repos" / "lib")
    lib.write("README", "lib main\n")
    lib_main = lib.commit()
    git(lib.path, "checkout", "-q", "-b", "stable")
    lib.write("README", "lib stable\n")
    lib_stable = lib.dangling_commit()
    source = f"file://{lib.path}" if lib_url else str(lib.path)
    state = {"main": lib_main, "stable": lib_stable}
    spec = make_spec(repo, project_commit, others={"org/lib": (source, state)})

    result = run_build(spec, BaseControl(), options)

    assert result.result is Result.SUCCESS, result.message
    log_dir = Path(result.log_path).parent
    assert (log_dir / "checkouts").read_text().splitlines() == [
        f"org/project {project_commit} main",
        f"org/lib {lib_main} main",
    ]
    branches = (log_dir / "lib-branches").read_text().splitlines()
    assert sorted(branches) == [f"main {lib_main}", f"stable {lib_stable}"]
    assert (log_dir / "lib-remotes").read_text() == ""


def test_override_checkout_and_only_branch(
    repo: Repo, tmp_path: Path, options: RunnerOptions
) -> None:
    repo.script("run.sh", SHOW_CHECKOUTS)
    commit = repo.commit()
    lib = Repo.create(tmp_path / "repos" / "lib", branch="develop")
    lib_develop = lib.commit()
    spec = make_spec(repo, commit, others={"org/lib": (str(lib.path), {"develop": lib_develop})})

    result = run_build(spec, BaseControl(), options)

    assert result.result is Result.SUCCESS, result.message
    checkouts = (Path(result.log_path).parent / "checkouts").read_text().splitlines()
    assert checkouts[1] == f"org/lib {lib_develop} develop"


def test_missing_commit_is_retry(repo: Repo, options: RunnerOptions) -> None:
    repo.script("run.sh", "true")
    repo.commit()
    spec = make_spec(repo, "1" * 40)

    result = run_build(spec, BaseControl(), options)

    assert result.result is Result.RETRY
    assert result.message == f"workspace: {repo.path}: no such commit for main at {'1' * 40}"
    assert result.steps == ()


def test_unreachable_source_is_retry(repo: Repo, tmp_path: Path, options: RunnerOptions) -> None:
    repo.script("run.sh", "true")
    commit = repo.commit()
    spec = make_spec(repo, commit, sources={"org/project": f"file://{tmp_path}/nowhere"})

    result = run_build(spec, BaseControl(), options)

    assert result.result is Result.RETRY
    assert "git fetch failed" in result.message


def test_workspace_removed_after_build_logs_kept(repo: Repo, options: RunnerOptions) -> None:
    repo.script("run.sh", "exit 1")
    spec = make_spec(repo, repo.commit())
    control = LocalControl()

    result = run_build(spec, control, options)

    assert control.info is not None
    workspace = Path(control.info.workspace)
    assert workspace == options.state_dir / "builds" / spec.context.build_uuid
    assert not workspace.exists()
    assert result.held_workspace is None
    assert Path(result.log_path).is_file()


def test_workspace_kept_when_held_and_failed(repo: Repo, options: RunnerOptions) -> None:
    made = "mkdir -p ro/x && touch ro/x/f && chmod -w ro/x ro && echo made > out"
    repo.script("run.sh", f"{made} && exit 1")
    spec = make_spec(repo, repo.commit(), hold=True)

    result = run_build(spec, BaseControl(), options)

    assert result.result is Result.FAILURE
    assert result.held_workspace == str(options.state_dir / "builds" / spec.context.build_uuid)
    assert (Path(result.held_workspace) / "src/org/project/out").read_text() == "made\n"


def test_a_held_build_that_succeeds_is_cleaned_up(repo: Repo, options: RunnerOptions) -> None:
    repo.script("run.sh", "echo made > out")
    spec = make_spec(repo, repo.commit(), hold=True)

    result = run_build(spec, BaseControl(), options)

    assert result.result is Result.SUCCESS and result.held_workspace is None
    assert not (options.state_dir / "builds" / spec.context.build_uuid).exists()


def test_read_only_leftovers_are_removed(repo: Repo, options: RunnerOptions) -> None:
    repo.script("run.sh", "mkdir -p ro/x && touch ro/x/f && chmod -w ro/x ro")
    spec = make_spec(repo, repo.commit())

    run_build(spec, BaseControl(), options)

    assert not (options.state_dir / "builds" / spec.context.build_uuid).exists()


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("playbooks/missing.yaml", "no such file in the repository"),
        ("../playbooks/run.yml", "must be a relative path inside the repository"),
        ("../../../../bin/true", "must be a relative path inside the repository"),
        ("/bin/true", "must be a relative path inside the repository"),
        ("escape.sh", "leads out of the repository"),
        ("escape-dir/true", "leads out of the repository"),
        (".git/hooks/x", "may not point into the .git folder"),
        ("missing.sh", "no such file in the repository"),
        ("ci", "no such file in the repository"),
        ("plain.txt", "is not executable"),
    ],
)
def test_refused_paths_are_error_and_nothing_runs(
    repo: Repo, options: RunnerOptions, path: str, message: str
) -> None:
    repo.script("ci/ok.sh", 'touch "$SLUICE_LOG_DIR/ran"')
    repo.write("playbooks/run.yaml", "- hosts: all\n", executable=True)
    repo.write("playbooks/run.yml", "- hosts: all\n", executable=True)
    repo.write("plain.txt", "text\n")
    repo.symlink("escape.sh", "/bin/true")
    repo.symlink("escape-dir", "/bin")
    spec = make_spec(repo, repo.commit(), pre_run=("ci/ok.sh",), run=(path,))

    result = run_build(spec, BaseControl(), options)

    assert result.result is Result.ERROR
    assert result.message.startswith(f"run: {path}: ")
    assert message in result.message
    assert result.steps == ()
    assert not (Path(result.log_path).parent / "ran").exists()
    assert not (options.state_dir / "builds" / spec.context.build_uuid).exists()


def test_symlink_inside_the_repository_is_fine(repo: Repo, options: RunnerOptions) -> None:
    repo.script("ci/real.sh", "echo real")
    repo.symlink("run.sh", "ci/real.sh")
    result = run_build(make_spec(repo, repo.commit()), BaseControl(), options)

    assert result.result is Result.SUCCESS, result.message


def test_ambiguous_branch_is_error_naming_the_fix(
    repo: Repo, tmp_path: Path, options: RunnerOptions
) -> None:
    repo.script("run.sh", "true")
    commit = repo.commit()
    lib = Repo.create(tmp_path / "repos" / "lib", branch="a")
    lib_commit = lib.commit()
    state = {"a": lib_commit, "b": lib_commit}
    spec = make_spec(repo, commit, others={"org/lib": (str(lib.path), state)})

    result = run_build(spec, BaseControl(), options)

    assert result.result is Result.ERROR
    assert result.message == (
        "org/lib: repo state has no branch 'main' and several others (a, b); "
        "name one with override-checkout"
    )


def test_steps_from_another_project_and_branch(
    repo: Repo, tmp_path: Path, options: RunnerOptions
) -> None:
    """Job content lives where the job's variant was defined (a config project, a branch)."""
    repo.script("run.sh", "echo project")
    commit = repo.commit()
    config = Repo.create(tmp_path / "repos" / "config")
    config.script("ci/base-pre.sh", 'echo "base pre in $(pwd)" > "$SLUICE_LOG_DIR/pre"')
    config_main = config.commit()
    git(config.path, "checkout", "-q", "-b", "legacy")
    config.script("ci/old-post.sh", 'echo "legacy post" > "$SLUICE_LOG_DIR/post"')
    config_legacy = config.commit()
    state = {"main": config_main, "legacy": config_legacy}
    spec = make_spec(
        repo,
        commit,
        others={"org/config": (str(config.path), state)},
        pre_run=(playbook("ci/base-pre.sh", "org/config"),),
        post_run=(playbook("ci/old-post.sh", "org/config", "legacy"),),
    )

    result = run_build(spec, BaseControl(), options)

    assert result.result is Result.SUCCESS, result.message
    log_dir = Path(result.log_path).parent
    project_dir = options.state_dir / "builds" / spec.context.build_uuid / "src" / "org" / "project"
    assert (log_dir / "pre").read_text() == f"base pre in {project_dir}\n"
    assert (log_dir / "post").read_text() == "legacy post\n"
    assert [s.project for s in result.steps] == ["org/config", "org/project", "org/config"]


@pytest.mark.parametrize(
    ("step", "message"),
    [
        (playbook("run.sh", "org/other"), "job unit-tests: repo state lacks org/other"),
        (
            playbook("run.sh", branch="nope"),
            "run: run.sh: org/project has no branch 'nope' in the repo state",
        ),
    ],
)
def test_step_outside_the_repo_state_is_refused(
    repo: Repo, options: RunnerOptions, step: Playbook, message: str
) -> None:
    repo.script("run.sh", "true")
    spec = make_spec(repo, repo.commit(), run=(step,))

    result = run_build(spec, BaseControl(), options)

    assert result.result is Result.ERROR
    assert result.message == message


@pytest.mark.parametrize("share", [True, False], ids=["shared-objects", "fetched-objects"])
def test_local_source_shared_or_fetched(repo: Repo, options: RunnerOptions, share: bool) -> None:
    repo.script("run.sh", 'ls "$SLUICE_PROJECT_DIR/.git/objects/info" > "$SLUICE_LOG_DIR/info"')
    repo.commit()
    speculative = repo.dangling_commit()
    chosen = RunnerOptions(state_dir=options.state_dir, share_objects=share)

    result = run_build(make_spec(repo, speculative), BaseControl(), chosen)

    assert result.result is Result.SUCCESS, result.message
    listing = (Path(result.log_path).parent / "info").read_text().split()
    assert ("alternates" in listing) is share


CHECKOUT_STATE = """
dir="$SLUICE_PROJECT_DIR"
{
  git -C "$dir" rev-parse HEAD
  git -C "$dir" branch --show-current
  git -C "$dir" branch --format='%(refname:short) %(objectname)'
  git -C "$dir" status --porcelain
  git -C "$dir" fsck --no-dangling 2>&1 && echo fsck ok
} > "$SLUICE_LOG_DIR/state"
"""


@pytest.mark.parametrize(
    "branch, packed",
    [("main", False), ("main", True), ("release@1", False), ("stable/2.x", True)],
    ids=["plain-loose", "plain-packed", "branch-for-git", "nested-packed"],
)
def test_checkout_is_a_sound_repository(
    tmp_path: Path, options: RunnerOptions, branch: str, packed: bool
) -> None:
    """Written by hand (plain names, loose commits) or by git: the same repository."""
    repo = Repo.create(tmp_path / "repos" / "app", branch=branch)
    repo.script("run.sh", CHECKOUT_STATE)
    base = repo.commit()
    speculative = repo.dangling_commit()
    if packed:  # the commits live in a pack: looked up by git, not as loose objects
        git(repo.path, "update-ref", "refs/keep/speculative", speculative)
        git(repo.path, "gc", "-q", "--prune=now")
        assert not list((repo.path / ".git" / "objects").glob("??/*"))
    state = {branch: speculative, "other": base}

    spec = make_spec(repo, speculative, repo_state={"org/project": state})

    result = run_build(spec, BaseControl(), options)

    assert result.result is Result.SUCCESS, result.message
    lines = (Path(result.log_path).parent / "state").read_text().splitlines()
    assert lines[:2] == [speculative, branch]
    assert sorted(lines[2:4]) == sorted([f"{branch} {speculative}", f"other {base}"])
    assert lines[4:] == ["fsck ok"]  # a clean worktree, every object reachable


def test_loose_commits(repo: Repo) -> None:
    repo.write("README", "text\n")
    commit = repo.commit()
    objects = repo.path / ".git" / "objects"
    tree = git(repo.path, "rev-parse", "HEAD^{tree}")

    assert loose_commits(objects, [commit])
    assert not loose_commits(objects, [commit, tree])  # a tree is no commit
    assert not loose_commits(objects, ["0" * 40])
    assert not loose_commits(objects, ["../../etc/passwd"])
    git(repo.path, "gc", "-q", "--prune=now")
    assert not loose_commits(objects, [commit])  # packed: the caller asks git


def test_a_build_dir_outside_the_state_dir_holds_the_workspace(
    repo: Repo, tmp_path: Path, options: RunnerOptions
) -> None:
    """``executor.build_dir``: the job runs there, sandboxed; its logs stay in the state dir."""
    repo.script(
        "run.sh",
        'pwd > "$SLUICE_LOG_DIR/cwd"\n'
        'ls "$(dirname "$SLUICE_SRC_DIR")/.." > "$SLUICE_LOG_DIR/builds"\n',
    )
    commit = repo.commit()
    spec = make_spec(repo, commit)
    builds = tmp_path / "shm" / "builds"
    options = replace(options, build_dir=builds, sandbox="bwrap")

    result = run_build(spec, BaseControl(), options)

    assert result.result is Result.SUCCESS, result.message
    log_dir = Path(result.log_path).parent
    assert log_dir == options.state_dir / "logs" / spec.context.build_uuid
    assert (log_dir / "cwd").read_text().strip() == str(
        builds / spec.context.build_uuid / "src/org/project"
    )
    assert (log_dir / "builds").read_text().split() == [spec.context.build_uuid]
    # put aside as the process's spare for its next build (recycle.py)
    assert [path.name for path in builds.iterdir()] == [spare_of(builds).name]
    assert not (options.state_dir / "builds").exists()
