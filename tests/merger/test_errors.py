"""Errors are results: each failure names its kind, project, ref and change."""

from __future__ import annotations

from pathlib import Path

from scheduler.settings.sections import ConnectionSettings
from scheduler.wire.merger import MergeChange, MergeJob, ProjectRef, Status
from tests.merger.gitrepos import Remotes
from workers.merger import RepoCache, run_merge_job


def one(
    project: str = "org/a", branch: str = "main", ref: str = "refs/changes/1", commit: str = ""
) -> MergeJob:
    return MergeJob("err", (MergeChange("git", project, branch, ref=ref, commit=commit),))


def test_unreachable_remote(remotes: Remotes, cache: RepoCache) -> None:
    result = run_merge_job(one("org/missing"), cache)
    assert result.status is Status.FAILED
    failure = result.failure
    assert failure is not None
    assert failure.kind == "unreachable"
    assert failure.project == "org/missing" and failure.connection == "git"
    assert "org/missing" in failure.message


def test_unreachable_ssh_and_https_remotes(tmp_path: Path, remotes: Remotes) -> None:
    connections = {
        "ssh": ConnectionSettings("ssh", "git", "ssh://git@127.0.0.1:1/srv"),
        "web": ConnectionSettings("web", "git", "https://user:secret@127.0.0.1:1/git"),
    }
    cache = RepoCache(tmp_path / "state", connections, git_timeout=20)
    for name in connections:
        job = MergeJob("err", (MergeChange(name, "org/a", "main", ref="refs/changes/1"),))
        failure = run_merge_job(job, cache).failure
        assert failure is not None and failure.kind == "unreachable", failure
        assert failure.connection == name
        assert "secret" not in failure.message


def test_unknown_ref(remotes: Remotes, cache: RepoCache) -> None:
    a = remotes.create("org/a")
    a.change(1, {"one": "1\n"})
    job = MergeJob(
        "err",
        (
            MergeChange("git", "org/a", "main", ref="refs/changes/1", change_id="1,1"),
            MergeChange("git", "org/a", "main", ref="refs/changes/99", change_id="99,1"),
        ),
    )
    failure = run_merge_job(job, cache).failure
    assert failure is not None
    assert failure.kind == "unknown-ref"
    assert failure.ref == "refs/changes/99"
    assert failure.change_index == 1 and failure.change_id == "99,1"
    assert failure.project == "org/a"


def test_unknown_commit_and_branch(remotes: Remotes, cache: RepoCache) -> None:
    a = remotes.create("org/a")
    a.change(1, {"one": "1\n"})
    missing = "0123456789abcdef0123456789abcdef01234567"
    failure = run_merge_job(one(ref="", commit=missing), cache).failure
    assert failure is not None and failure.kind == "unknown-ref", failure
    assert failure.ref == missing and failure.change_index == 0
    failure = run_merge_job(one(branch="nope"), cache).failure
    assert failure is not None and failure.kind == "unknown-ref", failure
    assert failure.ref == "nope"


def test_invalid_input(remotes: Remotes, cache: RepoCache) -> None:
    for job in (
        one(ref="--upload-pack=touch /tmp/x"),
        one(branch="-x"),
        one(ref="", commit="not-a-sha"),
        one(project="../escape"),
        MergeJob("bad id/..", ()),
        MergeJob("x", (MergeChange("nowhere", "org/a", "main", ref="refs/changes/1"),)),
    ):
        result = run_merge_job(job, cache)
        assert result.status is Status.FAILED
        assert result.failure is not None and result.failure.kind == "invalid", job


def test_corrupt_remote(remotes: Remotes, cache: RepoCache) -> None:
    a = remotes.create("org/a", {"README": "hello\n", "big": "x" * 1000 + "\n"})
    a.change(1, {"one": "1\n"})
    blob = a.git("rev-parse", "refs/heads/main:big")
    (a.path / "objects" / blob[:2] / blob[2:]).unlink()
    result = run_merge_job(one(), cache)
    failure = result.failure
    assert failure is not None and failure.kind == "corrupt", failure
    assert failure.project == "org/a"
    assert not list(cache.root.glob("git/.tmp-*")), "no half-written clone is left"


def test_corrupt_cache_is_recloned(remotes: Remotes, cache: RepoCache) -> None:
    lines = [f"line {i}\n" for i in range(50)]
    a = remotes.create("org/a", {"README": "hello\n", "big": "".join(lines)})
    a.change(1, {"big": "".join(["first\n", *lines[1:]])})
    a.advance("main", {"big": "".join([*lines[:-1], "last\n"])})
    warm = run_merge_job(MergeJob("warm", (), required=(ProjectRef("git", "org/a"),)), cache)
    assert warm.status is Status.OK, warm.failure
    repo = cache.repo_path("git", "org/a")
    # Damage an object that no ref points at directly (the merge base's
    # version of "big"): the cheap check at open passes, the three-way merge
    # finds it, the repo is discarded and the job retried on a fresh clone.
    blob = cache.git.text(["rev-parse", "refs/heads/main~1:big"], repo)
    damage_object(cache, repo, blob)
    marker = repo / "marker-of-the-old-clone"
    marker.touch()
    result = run_merge_job(one(), cache)
    assert result.status is Status.OK, result.failure
    assert not marker.exists(), "the damaged repo was replaced by a fresh clone"
    assert cache.git.text(["cat-file", "-p", blob], repo).startswith("line 0")
    tip = result.commit_of("git", "org/a", "main")
    merged = cache.git.text(["show", f"{tip}:big"], repo).splitlines()
    assert merged[0] == "first" and merged[-1] == "last"


def damage_object(cache: RepoCache, repo: Path, sha: str) -> None:
    """Overwrite the compressed data of packed object ``sha`` with garbage."""
    (index,) = (repo / "objects" / "pack").glob("*.idx")
    listing = cache.git.text(["verify-pack", "-v", str(index)], repo)
    (offset,) = [int(line.split()[4]) for line in listing.splitlines() if line.startswith(sha)]
    pack = index.with_suffix(".pack")
    pack.chmod(0o644)
    with pack.open("r+b") as f:
        f.seek(offset + 2)
        f.write(b"\xff" * 16)


def test_broken_cache_repo_is_detected_at_open(remotes: Remotes, tmp_path: Path) -> None:
    a = remotes.create("org/a")
    a.change(1, {"one": "1\n"})
    connections = {"git": ConnectionSettings("git", "git", f"file://{remotes.base}")}
    cache = RepoCache(tmp_path / "state", connections)
    assert run_merge_job(one(), cache).status is Status.OK
    repo = cache.repo_path("git", "org/a")
    (repo / "HEAD").write_text("")  # what a crash mid-write could leave
    fresh = RepoCache(tmp_path / "state", connections)  # a new worker process
    result = run_merge_job(one(), fresh)
    assert result.status is Status.OK, result.failure
