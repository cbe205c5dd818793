"""The merger's answers without a git command each, against the git commands.

Branch heads from the repo's files (``branchrefs.py``), commits, diffs and
config files through one cat-file process (``catfile.py``, ``objects.py``):
each case compares the answer with the git command's on the same repo, and
the unusual cases with the fallback that asks git.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.merger.gitrepos import Remote, Remotes, git_env
from workers.merger import RepoCache
from workers.merger.branchrefs import HEADS, read_heads, read_refs
from workers.merger.catfile import CatFile, CatFileError
from workers.merger.errors import GitCommandError
from workers.merger.gitcmd import Git
from workers.merger.repo import Repo


@pytest.fixture
def repo(remotes: Remotes, cache: RepoCache) -> Iterator[Repo]:
    """The bare repo of a remote (a plain git repo like any cache repo)."""
    remote = remotes.create("org/a", {"README": "hello\n"})
    handle = Repo(remote.path, cache.git, "org/a")
    yield handle
    handle.close()


def remote_of(repo: Repo) -> Remote:
    """The repo as a remote of the tests, to write commits into."""
    return Remote(repo.path, git_env(Path(repo.git.env["HOME"])))


def git_heads(repo: Repo) -> list[tuple[str, str]]:
    return list(repo._heads_from_git().items())


# --------------------------------------------------------------------------
# Branch heads


def test_heads_packed_only_loose_and_with_slashes(remotes: Remotes, repo: Repo) -> None:
    remote = remote_of(repo)
    main = remote.rev("refs/heads/main")
    for name in ("feature/x", "feature-y", "a/b/c", "stable", "zz"):
        remote.git("update-ref", f"refs/heads/{name}", main)
    remote.git("update-ref", "refs/heads-not/x", main)  # sorts just before refs/heads/
    remote.git("update-ref", "refs/heads0/x", main)  # and just after
    remote.git("pack-refs", "--all")
    # A packed-refs full of job refs, as gc leaves it: the heads are bisected.
    jobs = "".join(f"{main} refs/sluice/jobs/job{n:05d}/merged-0\n" for n in range(3000))
    packed = repo.path / "packed-refs"
    header, _, body = packed.read_text().partition("\n")
    lines = sorted((body + jobs).splitlines(), key=lambda line: line.split(" ")[1].encode())
    packed.write_text(header + "\n" + "\n".join(lines) + "\n")
    assert not list((repo.path / "refs" / "heads").rglob("*")), "every ref is packed"
    heads = read_heads(repo.path)
    assert heads is not None
    assert list(heads) == ["a/b/c", "feature-y", "feature/x", "main", "stable", "zz"]
    assert list(heads.items()) == git_heads(repo)
    # Loose refs override packed ones; new ones join them, slashes and all.
    moved = remote.commit({"m": "m\n"}, parent="refs/heads/main", ref="refs/heads/stable")
    remote.git("update-ref", "refs/heads/feature/new/deep", moved)
    remote.git("update-ref", "-d", "refs/heads/zz")
    heads = read_heads(repo.path)
    assert heads is not None and heads["stable"] == moved and "zz" not in heads
    assert list(heads.items()) == git_heads(repo)
    assert list(repo.heads().items()) == git_heads(repo)


def test_the_bisection_finds_exactly_the_heads(tmp_path: Path) -> None:
    """Random sorted packed-refs files, with neighbours of refs/heads/ on both sides."""
    rng = random.Random(17)
    stems = ["refs/heads/", "refs/heads-", "refs/heads0", "refs/hea", "refs/a/", "refs/z/"]
    for trial in range(300):
        names = {
            rng.choice(stems) + "".join(rng.choice("ab-.0/") for _ in range(4)).strip("/.") + "x"
            for _ in range(rng.randint(0, 30))
        }
        lines, expected = ["# pack-refs with: peeled fully-peeled sorted "], {}
        for name in sorted(names, key=str.encode):
            sha = f"{rng.getrandbits(160):040x}"
            lines.append(f"{sha} {name}")
            if rng.random() < 0.2:
                lines.append(f"^{rng.getrandbits(160):040x}")
            if name.startswith("refs/heads/"):
                expected[name.encode()] = sha
        bare = tmp_path / f"r{trial}"
        bare.mkdir()
        (bare / "packed-refs").write_text("\n".join(lines) + "\n" * (trial % 2))
        assert read_refs(bare, HEADS) == expected, names


def test_heads_of_a_repo_without_any(tmp_path: Path, cache: RepoCache) -> None:
    bare = tmp_path / "empty.git"
    subprocess.run(["git", "init", "-q", "--bare", str(bare)], env=cache.git.env, check=True)
    assert read_heads(bare) == {}
    assert Repo(bare, cache.git, "empty").heads() == {}


@pytest.mark.parametrize(
    "damage",
    ["symref", "lock", "junk", "hidden", "unsorted", "reftable", "uppercase", "bad-name"],
)
def test_unusual_refs_are_left_to_git(repo: Repo, damage: str) -> None:
    remote = remote_of(repo)
    main = remote.rev("refs/heads/main")
    remote.git("update-ref", "refs/heads/other", main)
    remote.git("pack-refs", "--all")
    remote.git("update-ref", "refs/heads/loose", main)
    heads = repo.path / "refs" / "heads"
    if damage == "symref":
        remote.git("symbolic-ref", "refs/heads/alias", "refs/heads/main")
    elif damage == "lock":
        (heads / "main.lock").write_text(main + "\n")
    elif damage == "junk":
        (heads / "junk").write_text("not a sha\n")
    elif damage == "hidden":
        (heads / ".hidden").write_text(main + "\n")
    elif damage == "unsorted":
        packed = repo.path / "packed-refs"
        packed.write_text(packed.read_text().replace(" sorted", ""))
    elif damage == "reftable":
        (repo.path / "reftable").mkdir()
    elif damage == "uppercase":
        (heads / "upper").write_text(main.upper() + "\n")
    elif damage == "bad-name":
        (heads / "a b").write_text(main + "\n")
    assert read_heads(repo.path) is None
    assert list(repo.heads().items()) == git_heads(repo)  # what git says, as before


def test_heads_pointing_at_missing_objects_are_listed_as_git_does(repo: Repo) -> None:
    missing = "0123456789abcdef0123456789abcdef01234567"
    (repo.path / "refs" / "heads" / "broken").write_text(missing + "\n")
    assert list((read_heads(repo.path) or {}).items()) == git_heads(repo)
    assert (read_heads(repo.path) or {})["broken"] == missing


# --------------------------------------------------------------------------
# Commits


def test_commit_dates_and_parents_are_those_git_shows(repo: Repo) -> None:
    remote = remote_of(repo)
    first = remote.rev("refs/heads/main")
    second = remote.commit({"two": "2\n"}, parent="refs/heads/main")
    merge = remote.commit({"three": "3\n"}, parents=[second, first])
    odd = hash_commit(
        remote,
        f"tree {remote.rev(f'{first}^{{tree}}')}\nparent {first}\n"
        "author A <a@b> 17 +0000\ncommitter C <c@d> 0000001700000001 -0130\n"
        "gpgsig -----BEGIN-----\n parent 0123456789abcdef0123456789abcdef01234567\n"
        " committer X <x> 5 +0000\n -----END-----\n\nodd\n",
    )
    shas = [first, second, merge, odd]
    expected = dict(
        line.split() for line in remote.git("show", "-s", "--format=%H %ct", *shas).splitlines()
    )
    assert repo.commit_times(shas) == {sha: int(stamp) for sha, stamp in expected.items()}
    commits = repo.commits(shas)
    assert commits is not None
    assert commits[merge].parents == (second, first)
    assert commits[odd].parents == (first,) and commits[odd].time == 1_700_000_001
    assert repo.is_ancestor(first, merge) is True  # through the commits read
    assert repo.is_ancestor(merge, first) is None  # never claimed false


def test_a_committer_date_git_prints_oddly_is_asked_of_git(repo: Repo) -> None:
    remote = remote_of(repo)
    first = remote.rev("refs/heads/main")
    tree = remote.rev(f"{first}^{{tree}}")
    odd = hash_commit(remote, f"tree {tree}\nauthor A <a> 1 +0000\ncommitter C <c> 12x +0000\n\n")
    commits = repo.commits([odd])
    assert commits is not None and commits[odd].time is None
    with pytest.raises(ValueError):  # what the git command's answer always gave
        repo.commit_times([odd])


def hash_commit(remote: Remote, text: str) -> str:
    return remote.git(
        "hash-object", "-t", "commit", "-w", "--literally", "--stdin", stdin=text.encode()
    )


# --------------------------------------------------------------------------
# Changed files


def test_changed_files_are_those_of_git_diff(repo: Repo) -> None:
    remote = remote_of(repo)
    link = ("120000", "target")
    before = {
        b"keep": ("100644", "k\n"),
        b"edit": ("100644", "e\n"),
        b"gone": ("100644", "g\n"),
        b"exec": ("100644", "x\n"),
        b"tolink": ("100644", "l\n"),
        b"becomes-dir": ("100644", "f\n"),
        b"dir-goes/a/b": ("100644", "d\n"),
        b"dir-becomes-file/x": ("100644", "d\n"),
        b"deep/er/still/same": ("100644", "s\n"),
        b"deep/er/changed": ("100644", "c\n"),
        b"\xc3\xa9t\xc3\xa9": ("100644", "utf-8\n"),
        b"bad-\xff-name": ("100644", "not utf-8\n"),
    }
    after = {
        b"keep": ("100644", "k\n"),
        b"edit": ("100644", "E\n"),
        b"exec": ("100755", "x\n"),
        b"tolink": link,
        b"becomes-dir/inside": ("100644", "i\n"),
        b"dir-becomes-file": ("100644", "f\n"),
        b"new/nested/file": ("100644", "n\n"),
        b"deep/er/still/same": ("100644", "s\n"),
        b"deep/er/changed": ("100644", "C\n"),
        b"\xc3\xa9t\xc3\xa9": ("100644", "UTF-8\n"),
        b"bad-\xff-name": ("100644", "still not utf-8\n"),
    }
    base = remote.commit_entries(before)
    change = remote.commit_entries(after, parent=base)
    assert repo.is_ancestor(base, change) is True
    paths = repo._changed_paths(base, change)
    assert paths is not None, "answered without git diff"
    assert repo.changed_files(base, change) == git_diff(repo, base, change)
    assert repo.changed_files(change, change) == git_diff(repo, change, change) == []
    root = remote.commit_entries({b"alone": ("100644", "a\n")})
    assert repo._changed_paths(base, root) is None  # no ancestry known: git diff decides
    assert repo.changed_files(base, root) == ["alone"]  # no merge base: every file


def test_a_change_on_a_branch_that_merged_the_items_ahead_is_diffed_without_git(
    repo: Repo,
) -> None:
    """A gate's branch after items ahead merged: the change's parent is the merge-base."""
    remote = remote_of(repo)
    tip = remote.rev("refs/heads/main")
    ahead = [remote.commit({f"ahead{n}": f"{n}\n"}, parent=tip) for n in range(3)]
    change = remote.commit({"mine": "m\n", "ahead0": "changed too\n"}, parent=tip)
    merged = ahead[0]  # the first item fast-forwarded the branch
    for sha in ahead[1:]:  # the next ones merged on it
        merged = remote.commit({}, parents=[merged, sha])
    for base in (ahead[0], merged):
        assert repo._changed_paths(base, change) is not None, "answered without git diff"
        assert repo.changed_files(base, change) == git_diff(repo, base, change)
        assert repo.changed_files(base, change) == ["ahead0", "mine"]
    # the change merged into the branch already: git diff decides (nothing)
    landed = remote.commit({}, parents=[merged, change])
    assert repo._changed_paths(landed, change) is None
    assert repo.changed_files(landed, change) == git_diff(repo, landed, change) == []
    # a line of the branch's history that does not reach the change's parent
    alone = remote.commit_entries({b"other": ("100644", "o\n")})
    joined = remote.commit({}, parents=[merged, alone])
    assert repo._changed_paths(joined, change) is None
    assert repo.changed_files(joined, change) == git_diff(repo, joined, change)
    # a change on top of another change: its parent is not where the branch's lines end
    stacked = remote.commit({"on-top": "t\n"}, parent=change)
    assert repo._changed_paths(merged, stacked) is None
    assert repo.changed_files(merged, stacked) == git_diff(repo, merged, stacked)


def test_forged_dates_and_parents_leave_the_merge_base_to_git(repo: Repo) -> None:
    """A job's commits are the author's: odd dates and parents never yield a wrong answer."""
    remote = remote_of(repo)
    tip = remote.rev("refs/heads/main")
    ahead = remote.commit({"ahead": "a\n"}, parent=tip)
    tree = remote.rev(f"{ahead}^{{tree}}")
    # a commit of the branch dated before the change's parent (a forged or skewed clock)
    dated_back = hash_commit(
        remote,
        f"tree {tree}\nparent {ahead}\nauthor A <a> 1 +0000\ncommitter C <c> 1 +0000\n\nold\n",
    )
    change = remote.commit({"mine": "m\n"}, parent=tip)
    assert repo.known_merge_base(dated_back, change) is None
    assert repo.changed_files(dated_back, change) == git_diff(repo, dated_back, change)
    # a change of two parents (an octopus of its author's): git finds its merge-base
    other = remote.commit({"other": "o\n"}, parent=tip)
    octopus = remote.commit({"both": "b\n"}, parents=[change, other])
    assert repo.known_merge_base(ahead, octopus) is None
    assert repo.changed_files(ahead, octopus) == git_diff(repo, ahead, octopus)
    # a change whose parent is the branch itself: the branch is the merge-base
    on_top = remote.commit({"top": "t\n"}, parent=ahead)
    assert repo.known_merge_base(ahead, on_top) == ahead


def test_a_large_tree_is_left_to_git(repo: Repo) -> None:
    """Parsing thousands of entries in Python would cost more than git diff."""
    many = {f"file{n:05d}.txt".encode(): ("100644", "same\n") for n in range(3000)}
    base = remote_of(repo).commit_entries(many)
    change = remote_of(repo).commit_entries(
        {**many, b"file00042.txt": ("100644", "new\n")}, parent=base
    )
    assert repo.is_ancestor(base, change) is True
    assert repo._changed_paths(base, change) is None
    assert repo.changed_files(base, change) == git_diff(repo, base, change) == ["file00042.txt"]
    config = remote_of(repo).commit_entries({**many, b"zuul.yaml": ("100644", "- job: {}\n")})
    assert (
        repo.read_config(config)
        == repo._read_config_with_git(config)
        == {"zuul.yaml": "- job: {}\n"}
    )
    assert not repo.config_memo


def test_a_changed_submodule_is_left_to_git_diff(repo: Repo) -> None:
    remote = remote_of(repo)
    sub = remote.rev("refs/heads/main")
    base = remote.commit_entries({b"lib": ("160000", sub), b"f": ("100644", "f\n")})
    bumped = remote.commit_entries(
        {b"lib": ("160000", "0123456789abcdef0123456789abcdef01234567"), b"f": ("100644", "g\n")},
        parent=base,
    )
    assert repo._changed_paths(base, bumped) is None  # .gitmodules may say: ignore it
    assert repo.changed_files(base, bumped) == git_diff(repo, base, bumped) == ["f", "lib"]
    same = remote.commit_entries({b"lib": ("160000", sub), b"f": ("100644", "h\n")}, parent=base)
    assert repo._changed_paths(base, same) == [b"f"]  # an unchanged submodule is no question


def git_diff(repo: Repo, base: str, commit: str) -> list[str]:
    out = repo.git.run(
        ["diff", "--name-only", "-z", "--no-renames", f"{base}...{commit}"], repo.path
    )
    return sorted(p.decode("utf-8", "replace") for p in out.stdout.split(b"\0") if p)


# --------------------------------------------------------------------------
# Config files


CONFIG_TREE = {
    b".sluice.yaml": ("100644", "- pipeline: {name: check}\n"),
    b".zuul.d/notes.txt": ("100644", "not config\n"),
    b".zuul.d/sub/deeper/more.yaml": ("100644", "- job: {name: deep}\n"),
    b".zuul.d/z.yaml": ("100755", "- job: {name: exec}\n"),
    b".zuul.yaml": ("120000", "zuul.d/jobs.yaml"),  # a symlink: ls-tree says blob
    b"src/zuul.yaml": ("100644", "not config\n"),
    b"zuul.d/jobs.yaml": ("100644", "- job: {name: j}\n"),
    b"zuul.d/lib": ("160000", "0123456789abcdef0123456789abcdef01234567"),
    b"zuul.d/lib.yaml": ("160000", "0123456789abcdef0123456789abcdef01234567"),
    b"zuul.yaml/inside.yaml": ("100644", "a directory named like a file\n"),
}


@pytest.mark.parametrize(
    "entries",
    [
        CONFIG_TREE,
        {b"README": ("100644", "no config\n")},
        {b"zuul.d": ("100644", "a file named like a directory\n"), b"a": ("100644", "a\n")},
        {b"zuul.yaml": ("160000", "0123456789abcdef0123456789abcdef01234567")},
        {b"zuul.d/\xff.yaml": ("100644", "not utf-8\n"), b"zuul.yaml": ("100644", "\xe9\n")},
    ],
    ids=["everything", "none", "file-named-zuul.d", "submodule", "not-utf-8"],
)
def test_config_files_are_those_git_lists(
    repo: Repo, entries: dict[bytes, tuple[str, str]]
) -> None:
    commit = remote_of(repo).commit_entries(entries)
    fast = repo.read_config(commit)
    assert list(fast.items()) == list(repo._read_config_with_git(commit).items())
    assert repo.config_memo, "answered without ls-tree"
    if entries is CONFIG_TREE:
        assert list(fast) == [
            ".sluice.yaml",
            ".zuul.d/sub/deeper/more.yaml",
            ".zuul.d/z.yaml",
            ".zuul.yaml",
            "zuul.d/jobs.yaml",
        ]
        assert fast[".zuul.yaml"] == "zuul.d/jobs.yaml"


def test_unchanged_config_is_read_once(repo: Repo, monkeypatch: pytest.MonkeyPatch) -> None:
    remote = remote_of(repo)
    first = remote.commit_entries({**CONFIG_TREE, b"code": ("100644", "1\n")})
    second = remote.commit_entries({**CONFIG_TREE, b"code": ("100644", "2\n")}, parent=first)
    assert repo.read_config(first)
    asked: list[list[str]] = []
    real = CatFile.contents

    def counting(self: CatFile, names: list[str]) -> object:
        asked.append(list(names))
        return real(self, names)

    monkeypatch.setattr(CatFile, "contents", counting)
    files = repo.read_config(second)
    assert files == repo._read_config_with_git(second)
    assert len(asked) == 1, "only the root tree was read"
    changed = remote.commit_entries({**CONFIG_TREE, b"zuul.d/jobs.yaml": ("100644", "new\n")})
    assert repo.read_config(changed)["zuul.d/jobs.yaml"] == "new\n"


# --------------------------------------------------------------------------
# The cat-file process


def test_cat_file_answers_and_sees_objects_written_after_it_started(repo: Repo) -> None:
    remote = remote_of(repo)
    main = remote.rev("refs/heads/main")
    cat = CatFile(repo.git, repo.path)
    try:
        info = cat.info([main, "refs/heads/main^{commit}", "0" * 40, "nonexistent-ref"])
        assert info[0] is not None and info[0].kind == "commit" and info[0].sha == main
        assert info[1] == info[0]
        assert info[2:] == [None, None]
        many = cat.info([f"{main}^{{tree}}"] * 3000)  # more than one chunk of questions
        assert len(many) == 3000 and all(i is not None and i.kind == "tree" for i in many)
        new = remote.commit({"later": "written after the start\n"}, parent="refs/heads/main")
        remote.git("repack", "-a", "-d", "-q")  # even once packed by another process
        (answer,) = cat.contents([f"{new}:later"])
        assert answer is not None and answer[1] == b"written after the start\n"
    finally:
        cat.close()


def test_ambiguous_names_are_not_found(repo: Repo, tmp_path: Path) -> None:
    blobs = []
    for n in range(2000):  # some two of them share their first four hex digits
        blobs.append(tmp_path / f"blob{n}")
        blobs[-1].write_text(f"{n}\n")
    listing = "".join(f"{path}\n" for path in blobs).encode()
    out = remote_of(repo).git("hash-object", "-w", "--stdin-paths", stdin=listing)
    prefixes = [sha[:4] for sha in out.split()]
    shared = next(p for p in prefixes if prefixes.count(p) > 1)
    assert repo.commits_of([shared]) == {shared: None}
    assert repo.commits_of([shared]) == repo_commits_of_with_git(repo, [shared])


def repo_commits_of_with_git(repo: Repo, revs: list[str]) -> dict[str, str | None]:
    stdin = "".join(f"{rev}^{{commit}}\n" for rev in revs).encode()
    out = repo.git.run(["cat-file", "--batch-check"], repo.path, stdin=stdin).stdout
    lines = [line.partition(" ") for line in out.decode().splitlines()]
    return {
        rev: sha if kind.startswith("commit") else None
        for rev, (sha, _, kind) in zip(revs, lines, strict=True)
    }


def test_a_dead_or_slow_cat_file_is_an_error_and_git_answers(repo: Repo) -> None:
    main = remote_of(repo).rev("refs/heads/main")
    cat = CatFile(repo.git, repo.path)
    os.kill(cat.process.pid, signal.SIGKILL)
    with pytest.raises(CatFileError):
        cat.info([main])
    cat.close()
    slow = CatFile(Git(repo.git.env, timeout=0.0), repo.path)
    with pytest.raises(CatFileError, match="no answer"):
        slow.info([main])
    # The repo falls back to the git commands, and stays with them under this lock.
    head = "refs/heads/main"
    assert repo.commits_of([head]) == {head: main}
    assert repo._objects is not None
    os.kill(repo._objects.process.pid, signal.SIGKILL)
    assert repo.commits_of([head, "0" * 40]) == {head: main, "0" * 40: None}
    assert repo._objects is None and repo._objects_failed


def test_loose_commits_are_known_from_their_files(
    repo: Repo, monkeypatch: pytest.MonkeyPatch
) -> None:
    remote = remote_of(repo)
    loose = remote.rev("refs/heads/main")
    tree = remote.rev(f"{loose}^{{tree}}")
    tag = remote.git(
        "mktag", stdin=f"object {loose}\ntype commit\ntag t\ntagger T <t@t> 1 +0000\n\n".encode()
    )
    asked: list[list[str]] = []
    real = CatFile.info

    def counting(self: CatFile, names: list[str]) -> object:
        asked.append(list(names))
        return real(self, names)

    monkeypatch.setattr(CatFile, "info", counting)
    assert repo.commits_of([loose]) == {loose: loose}
    assert asked == [], "a loose commit needs no process"
    # Anything but a loose commit is cat-file's: a tree, a tag (peeled), a packed commit.
    assert repo.commits_of([tree, tag]) == repo_commits_of_with_git(repo, [tree, tag])
    assert repo.commits_of([tag]) == {tag: loose}
    assert asked == [[f"{tree}^{{commit}}", f"{tag}^{{commit}}"], [f"{tag}^{{commit}}"]]
    remote.git("repack", "-a", "-d", "-q")
    asked.clear()
    assert repo.commits_of([loose]) == {loose: loose} and asked == [[f"{loose}^{{commit}}"]]
    # With replace refs, git answers for the replacement: so does cat-file.
    newer = remote.commit({"n": "n\n"}, parent="refs/heads/main")
    remote.git("replace", newer, loose)
    again = Repo(repo.path, repo.git, "again")
    asked.clear()
    assert again.commits_of([newer]) == repo_commits_of_with_git(again, [newer])
    assert asked == [[f"{newer}^{{commit}}"]]
    again.close()


def test_a_broken_loose_commit_fails_as_it_did(repo: Repo) -> None:
    broken = remote_of(repo).commit({"b": "b\n"}, parent="refs/heads/main")
    (repo.path / "objects" / broken[:2] / broken[2:]).write_bytes(b"not zlib")
    with pytest.raises(GitCommandError, match="is corrupt"):
        repo_commits_of_with_git(repo, [broken])
    with pytest.raises(GitCommandError, match="is corrupt"):
        repo.commits_of([broken])
