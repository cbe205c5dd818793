"""Zuul's merge modes, applied in a cache repo's worktree with the git CLI.

Each mode takes the current speculative tip of a branch and the change's
commit and returns the new tip:

``merge``          ``git merge`` (a fast-forward when the change is already
                   on top of the tip, as plain ``git merge`` does); run as
                   ``git merge-tree`` + ``git commit-tree``, same commits
``merge-resolve``  ``git merge -s resolve``: the old three-way strategy
                   without rename detection
``squash-merge``   ``git merge --squash`` and one new commit on the tip
                   (also through ``merge-tree``)
``cherry-pick``    ``git cherry-pick`` of the change's commit (a merge
                   commit is merged with ``-s resolve`` instead); a change
                   already contained in the tip adds no commit
``rebase``         check out the change and ``git rebase`` it onto the tip

Commits are **deterministic**: author and committer identity are fixed
(:data:`MERGER_NAME`, :data:`MERGER_EMAIL`), both dates are a timestamp
given by the caller, and messages name the change only (no paths or
hostnames). Cherry-pick and rebase keep the change's author as git always
does. Two mergers given the same commits and timestamp therefore create
commits with the same shas.

A conflict raises :class:`MergeConflictError` with the conflicting paths;
a worktree is left as git left it (the next job resets it).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from scheduler.wire.merger import MergeMode
from workers.merger.errors import GitCommandError, MergeConflictError
from workers.merger.gitcmd import Git

MERGER_NAME = "Sluice Merger"
MERGER_EMAIL = "merger@sluice.invalid"


def identity_env(timestamp: int) -> dict[str, str]:
    """Fixed identity and dates for every commit the merger creates."""
    date = f"{timestamp} +0000"
    return {
        "GIT_AUTHOR_NAME": MERGER_NAME,
        "GIT_AUTHOR_EMAIL": MERGER_EMAIL,
        "GIT_AUTHOR_DATE": date,
        "GIT_COMMITTER_NAME": MERGER_NAME,
        "GIT_COMMITTER_EMAIL": MERGER_EMAIL,
        "GIT_COMMITTER_DATE": date,
    }


def merge_message(change_name: str) -> str:
    return f"Merge '{change_name}'"


class Applier:
    """Applies the changes of one project, in order, keeping track of the worktree.

    ``merge`` and ``squash-merge`` run in the bare repo with
    ``git merge-tree --write-tree`` (the same ``ort`` merge as ``git merge``,
    in memory: no index, no checkout) and ``git commit-tree``; the commits
    are byte-for-byte those ``git merge`` would make. The other modes need
    a worktree, which is only prepared (``worktree(tip)``) when one of them
    comes up, and only checked out again when it is not already at the tip.

    ``merge_base(tip, commit)`` (None when unknown) spares the ``git
    merge-base`` of a change on top of its tip (the merge-base is the tip
    itself) or of a change made on an older tip of a branch that moved on
    (its parent).
    """

    def __init__(
        self,
        git: Git,
        repo: Path,
        worktree: Callable[[str], Path],
        merge_base: Callable[[str, str], str | None] | None = None,
    ) -> None:
        self.git = git
        self.repo = repo
        self._make_worktree = worktree
        self._known_base = merge_base
        self._worktree: Path | None = None
        self._worktree_head = ""

    def apply(self, mode: MergeMode, tip: str, commit: str, *, name: str, timestamp: int) -> str:
        """Apply ``commit`` on ``tip`` with ``mode``; return the new tip."""
        dated = self.git.with_env(**identity_env(timestamp))
        message = merge_message(name)
        if mode in (MergeMode.MERGE, MergeMode.SQUASH_MERGE):
            squash = mode is MergeMode.SQUASH_MERGE
            known = self._known_base(tip, commit) if self._known_base is not None else None
            return _tree_merge(
                dated, self.repo, tip, commit, message=message, squash=squash, base=known
            )
        worktree = self._worktree_at(tip)
        self._worktree_head = ""  # unknown until the mode succeeds
        _MODES[mode](dated, worktree, commit, message)
        self._worktree_head = dated.text(["rev-parse", "HEAD"], worktree)
        return self._worktree_head

    def _worktree_at(self, tip: str) -> Path:
        if self._worktree is None:
            self._worktree = self._make_worktree(tip)
        if self._worktree_head != tip:
            self.git.run(["checkout", "--quiet", "--force", "--detach", tip], self._worktree)
            self._worktree_head = tip
        return self._worktree


def _tree_merge(
    git: Git, repo: Path, tip: str, commit: str, *, message: str, squash: bool, base: str | None
) -> str:
    """``git merge`` (or ``--squash`` and commit) of ``commit`` into ``tip``, without a worktree.

    ``base``: their merge-base when it is known (else ``git merge-base`` finds it).
    """
    if base is None:
        base = _merge_base(git, repo, tip, commit)
    if not squash and base == tip:
        return commit  # a fast-forward, as git merge does
    if not squash and base == commit:
        return tip  # already up to date
    proc = git.run(
        ["merge-tree", "--write-tree", "--name-only", "--no-messages", "-z", tip, commit],
        repo,
        check=False,
    )
    fields = [f.decode("utf-8", "replace") for f in proc.stdout.split(b"\0") if f]
    if proc.returncode == 1 and fields:
        raise MergeConflictError("merge conflict", sorted(set(fields[1:])))
    if proc.returncode != 0 or not fields:
        stderr = proc.stderr.decode("utf-8", "replace")
        raise GitCommandError(["merge-tree", tip, commit], proc.returncode, stderr)
    parents = ["-p", tip] if squash else ["-p", tip, "-p", commit]
    return git.text(["commit-tree", fields[0], *parents, "-m", message], repo)


def _merge_base(git: Git, repo: Path, tip: str, commit: str) -> str:
    found = git.run(["merge-base", tip, commit], repo, check=False)
    if found.returncode == 1 and not found.stderr.strip():
        raise MergeConflictError("unrelated histories: no merge base", [])
    if found.returncode != 0:
        stderr = found.stderr.decode("utf-8", "replace")
        raise GitCommandError(["merge-base", tip, commit], found.returncode, stderr)
    return found.stdout.decode().strip()


def _merge_resolve(git: Git, wt: Path, commit: str, message: str) -> None:
    _attempt(git, wt, ["merge", "--quiet", "--no-edit", "-s", "resolve", "-m", message, commit])


def _cherry_pick(git: Git, wt: Path, commit: str, message: str) -> None:
    parents = git.text(["rev-list", "--parents", "-n", "1", commit], wt).split()[1:]
    if len(parents) > 1:
        _merge_resolve(git, wt, commit, message)
        return
    _attempt(git, wt, ["cherry-pick", "--keep-redundant-commits", commit])
    if not parents:
        return
    # An empty result of a non-empty change means the tip already has it:
    # drop the empty commit instead of keeping a no-op on the branch.
    trees = git.text(
        ["rev-parse", "HEAD^{tree}", "HEAD^^{tree}", f"{commit}^{{tree}}", f"{commit}^^{{tree}}"],
        wt,
    ).split()
    if trees[0] == trees[1] and trees[2] != trees[3]:
        git.run(["checkout", "--quiet", "--detach", "HEAD^"], wt)


def _rebase(git: Git, wt: Path, commit: str, message: str) -> None:
    tip = git.text(["rev-parse", "HEAD"], wt)
    git.run(["checkout", "--quiet", "--force", "--detach", commit], wt)
    _attempt(git, wt, ["rebase", "--quiet", "--no-autostash", tip])


# What git prints when a merge, cherry-pick or rebase cannot be done cleanly.
_CONFLICT_MARKERS = (b"CONFLICT", b"Automatic merge failed", b"unrelated histories")


def _attempt(git: Git, wt: Path, args: list[str]) -> None:
    """Run a merging command; turn a conflict into :class:`MergeConflictError`."""
    proc = git.run(args, wt, check=False)
    if proc.returncode == 0:
        return
    unmerged = git.run(["diff", "--name-only", "--diff-filter=U", "-z"], wt, check=False).stdout
    files = sorted({p.decode("utf-8", "replace") for p in unmerged.split(b"\0") if p})
    output = proc.stdout + proc.stderr
    if files or any(marker in output for marker in _CONFLICT_MARKERS):
        raise MergeConflictError(f"{args[0]} conflict", files)
    raise GitCommandError(args, proc.returncode, output.decode("utf-8", "replace"))


# The modes that need a worktree (merge and squash-merge: _tree_merge).
_MODES: dict[MergeMode, Callable[[Git, Path, str, str], None]] = {
    MergeMode.MERGE_RESOLVE: _merge_resolve,
    MergeMode.CHERRY_PICK: _cherry_pick,
    MergeMode.REBASE: _rebase,
}
