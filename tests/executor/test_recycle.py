"""Recycled workspaces: whatever a build left, the next build's workspace is as if made anew."""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from scheduler.wire.build_spec import BuildSpec
from tests.executor.helpers import Repo, git, make_spec, with_context
from workers.executor import BaseControl, Result, RunnerOptions, run_build
from workers.executor.environment import write_job_files
from workers.executor.recycle import remove_orphan_spares, spare_of
from workers.executor.workspace import (
    BuildLayout,
    checkout_projects,
    create_folders,
    remove_stale_workspaces,
)

# What a job may do to its workspace; every line must leave no trace in the next one.
TAMPER = r"""
ws="$SLUICE_WORKSPACE"; p="$SLUICE_SRC_DIR/org/project"; lib="$SLUICE_SRC_DIR/org/lib"
echo junk > "$HOME/.profile"; mkdir -p "$HOME/.cache/x" "$TMPDIR/t"; echo 1 > "$TMPDIR/t/f"
printf 'SAME!\n' > "$p/same.txt"; touch -d '2001-01-01' "$p/same.txt"  # same size, old time
echo untracked > "$p/untracked.txt"; mkdir -p "$p/build/out"; echo o > "$p/build/out/o"
chmod 0777 "$p/tool.sh"; chmod 0600 "$p/README"; chmod 0500 "$p/docs"
rm -rf "$p/dir"; ln -s /etc "$p/dir"                                  # a folder made a symlink
ln "$p/keep.txt" "$SLUICE_LOG_DIR/hardlink"                           # a second link, outside
mkdir -p "$p/.git/hooks"; printf '#!/bin/sh\necho hooked\n' > "$p/.git/hooks/post-checkout"
chmod +x "$p/.git/hooks/post-checkout"
git -C "$p" config core.fsmonitor "touch $SLUICE_LOG_DIR/fsmonitor-ran"
git -C "$p" branch evil; git -C "$p" tag evil-tag
echo x > "$p/.git/ORIG_HEAD"; rm -f "$p/.git/objects/info/alternates"; echo bad > "$p/.git/HEAD2"
echo leaked > "$SLUICE_LOG_DIR/outside"; rm -f "$SLUICE_VARS_FILE"
ln -s "$SLUICE_LOG_DIR/outside" "$SLUICE_VARS_FILE"                    # vars.json a symlink out
echo '{}' > "$SLUICE_RESULT_FILE"; echo extra > "$ws/sluice/extra"
echo top > "$ws/leftover"; mkdir -p "$ws/content/0/org/project"; echo c > "$ws/secrets"
rm -rf "$lib/.git/refs"; echo file > "$lib/.git/refs"                 # a folder made a file
chmod 0 "$lib/sub"; chmod 0700 "$p/.git/config"; chmod 0600 "$SLUICE_RESULT_FILE"
"""


def snapshot(root: Path) -> dict[str, tuple[str, int, str]]:
    """Every entry under ``root``: kind, permissions, content (a digest, or a link's target).

    A file's kind says how many links it has.

    ``.git/index`` is left out (its stat data differs by design: git reads it
    back below) and so are ``vars.json``'s contents (the build's uuid) and
    the reflogs' (each line carries the second it was written).
    """
    found: dict[str, tuple[str, int, str]] = {}
    for folder, names, files in os.walk(root):
        for name in names + files:
            path = Path(folder) / name
            rel = str(path.relative_to(root))
            info = path.lstat()
            perm = stat.S_IMODE(info.st_mode)
            if stat.S_ISLNK(info.st_mode):
                found[rel] = ("link", perm, os.readlink(path))
            elif stat.S_ISDIR(info.st_mode):
                found[rel] = ("dir", perm, "")
            elif rel.endswith(".git/index") or ".git/logs/" in rel or rel == "sluice/vars.json":
                found[rel] = (f"file {info.st_nlink}", perm, "")
            else:
                digest = hashlib.sha256(path.read_bytes()).hexdigest()
                found[rel] = (f"file {info.st_nlink}", perm, digest)
    return found


def git_view(checkout: Path) -> list[str]:
    """What git says of a checkout: status, refs, index, local config, fsck."""
    return [
        git(checkout, "status", "--porcelain", "--ignored", "--untracked-files=all"),
        git(checkout, "for-each-ref", "--format=%(refname) %(objectname)"),
        git(checkout, "ls-files", "--stage"),
        git(checkout, "config", "--local", "--list"),
        git(checkout, "rev-parse", "HEAD", "--abbrev-ref", "HEAD"),
        git(checkout, "fsck", "--no-dangling", "--no-progress"),
    ]


def prepare(spec: BuildSpec, options: RunnerOptions, recycle: bool) -> BuildLayout:
    """What a build's preparation writes (runner.prepare_workspace's workspace part)."""
    layout = BuildLayout.for_build(options.state_dir, spec.context.build_uuid, options.build_dir)
    recycled = create_folders(layout, spec.context.repo_state if recycle else None)
    checkout_projects(spec, layout, recycled=recycled)
    write_job_files(spec, layout)
    return layout


@pytest.fixture
def projects(repo: Repo, tmp_path: Path) -> dict[str, tuple[Repo, str, str]]:
    """Three projects, each at a commit A and a commit B that differs in every way it can."""
    repo.script("run.sh", "true")
    repo.script("tamper.sh", TAMPER)
    repo.write("same.txt", "same!\n")
    repo.write("keep.txt", "keep\n")
    repo.write("README", "a\n")
    repo.write("tool.sh", "#!/bin/sh\n", executable=True)
    repo.write("docs/a.md", "doc a\n")
    repo.write("dir/x", "x\n")
    repo.write("gone/deep/file", "gone\n")
    repo.symlink("link", "README")
    project_a = repo.commit()
    repo.write("README", "b, longer\n")
    repo.write("tool.sh", "#!/bin/sh\necho b\n")  # no longer executable
    repo.write("new/file", "new\n", executable=True)
    git(repo.path, "rm", "-q", "-r", "gone")
    (repo.path / "link").unlink()
    repo.symlink("link", "keep.txt")
    project_b = repo.commit()
    lib = Repo.create(tmp_path / "repos" / "lib")
    lib.write("sub/file", "lib a\n")
    lib_a = lib.commit()
    lib.write("sub/file", "lib b\n")
    lib_b = lib.commit()
    big = Repo.create(tmp_path / "repos" / "big")  # more files than treecheckout writes: git's
    for index in range(80):
        big.write(f"f{index}", f"{index}\n")
    big_a = big.commit()
    big.write("f0", "changed\n")
    big_b = big.commit()
    return {
        "org/project": (repo, project_a, project_b),
        "org/lib": (lib, lib_a, lib_b),
        "org/big": (big, big_a, big_b),
    }


def spec_at(projects: dict[str, tuple[Repo, str, str]], which: int, **fields: object) -> BuildSpec:
    repo, *commits = projects["org/project"]
    others = {
        name: (str(other.path), {other.branch: other_commits[which]})
        for name, (other, *other_commits) in projects.items()
        if name != "org/project"
    }
    return make_spec(repo, commits[which], others=others, **fields)  # type: ignore[arg-type]


def test_a_recycled_workspace_is_the_one_made_anew(
    projects: dict[str, tuple[Repo, str, str]], options: RunnerOptions
) -> None:
    tampered = run_build(spec_at(projects, 0, run=("tamper.sh",)), BaseControl(), options)
    assert tampered.result is Result.SUCCESS, tampered.message
    log_dir = Path(tampered.log_path).parent
    assert spare_of(options.state_dir / "builds").is_dir()

    spec = spec_at(projects, 1)
    recycled = prepare(spec, options, recycle=True)
    assert not spare_of(options.state_dir / "builds").exists()  # taken
    fresh = prepare(with_context(spec, build_uuid="f" * 32), options, recycle=False)

    assert snapshot(recycled.root) == snapshot(fresh.root)
    for project in projects:
        assert git_view(recycled.project_dir(project)) == git_view(fresh.project_dir(project))
    # nothing of the tampering ran or leaked
    assert not (log_dir / "fsmonitor-ran").exists()
    assert (log_dir / "outside").read_text() == "leaked\n"  # vars.json was not written through
    assert (log_dir / "hardlink").read_text() == "keep\n"
    assert (recycled.project_dir("org/project") / "same.txt").read_text() == "same!\n"


def test_the_next_build_reuses_the_folders_and_unchanged_files(
    projects: dict[str, tuple[Repo, str, str]], options: RunnerOptions
) -> None:
    """The point of recycling: no folder or unchanged file is made again."""
    first = prepare(spec_at(projects, 0), options, recycle=True)
    readme, keep = (first.project_dir("org/project") / name for name in ("README", "keep.txt"))
    inodes = {path: path.stat().st_ino for path in (first.root, first.src_dir, readme, keep)}
    inodes[readme] = readme.stat().st_ino
    os.rename(first.root, spare_of(first.root.parent))  # what clean_up does

    second = prepare(spec_at(projects, 1), options, recycle=True)

    moved = {path: Path(str(path).replace(first.root.name, second.root.name)) for path in inodes}
    assert {moved[path].stat().st_ino for path in inodes} == set(inodes.values())
    assert moved[readme].read_text() == "b, longer\n"  # written over in place


def test_builds_in_a_row_put_the_workspace_aside_and_take_it_back(
    projects: dict[str, tuple[Repo, str, str]], options: RunnerOptions
) -> None:
    repo = projects["org/project"][0]
    repo.script("show.sh", 'stat -c %i "$SLUICE_WORKSPACE" > "$SLUICE_LOG_DIR/inode"\n')
    repo.commit()
    inodes = []
    for _ in range(3):
        commit = git(repo.path, "rev-parse", "HEAD")
        result = run_build(make_spec(repo, commit, run=("show.sh",)), BaseControl(), options)
        assert result.result is Result.SUCCESS, result.message
        inodes.append((Path(result.log_path).parent / "inode").read_text())
    assert len(set(inodes)) == 1
    builds = options.state_dir / "builds"
    assert [path.name for path in builds.iterdir()] == [spare_of(builds).name]


def test_without_recycling_every_workspace_is_removed(
    projects: dict[str, tuple[Repo, str, str]], options: RunnerOptions
) -> None:
    options = replace(options, recycle_workspaces=False)
    result = run_build(spec_at(projects, 0), BaseControl(), options)
    assert result.result is Result.SUCCESS, result.message
    assert list((options.state_dir / "builds").iterdir()) == []


def test_spares_of_processes_that_are_gone_are_removed(tmp_path: Path) -> None:
    builds = tmp_path / "builds"
    gone = subprocess.Popen(["true"])
    gone.wait()
    for pid in (os.getpid(), gone.pid):
        (spare_of(builds, pid) / "home").mkdir(parents=True)
    (builds / "0123abcd").mkdir()  # a killed worker's workspace: the sweep's

    assert remove_orphan_spares(builds) == [spare_of(builds, gone.pid).name]
    assert remove_stale_workspaces(tmp_path, keep=set(), build_dir=builds) == ["0123abcd"]
    assert [path.name for path in builds.iterdir()] == [spare_of(builds).name]
