"""A change: a ref of a project's repository to be merged into a target branch."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Change:
    """What an item tests.

    For a git connection, ``ref`` names a branch (``feature``, ``refs/heads/x``)
    or a commit, and ``commit`` is the sha it pointed at when enqueued; a
    newer commit on the same ref is a new patchset of the same change.
    """

    connection: str
    project: str
    branch: str
    ref: str
    commit: str = ""
    # A ref update of the branch itself (post/periodic pipelines): nothing to merge.
    is_branch_update: bool = False
    # Changes this one depends on that were not merged when it was enqueued
    # (Depends-On, resolved by its driver). A dependency cycle is recorded by
    # the change needing itself.
    needs: tuple[Change, ...] = ()
    # A dependency in the change's dependency cycle (it needs the change back,
    # directly or through others): the driver marks it when it follows the chain.
    cycle: bool = False

    @property
    def in_cycle(self) -> bool:
        return any(n.key == self.key for n in self.needs)

    @property
    def key(self) -> str:
        """Identity of the change across patchsets."""
        return f"{self.connection}/{self.project}@{self.branch}:{self.ref}"

    def same_change(self, other: Change) -> bool:
        return self.key == other.key

    def to_dict(self) -> dict[str, Any]:
        return {
            "connection": self.connection,
            "project": self.project,
            "branch": self.branch,
            "ref": self.ref,
            "commit": self.commit,
            "is_branch_update": self.is_branch_update,
            **({"needs": [n.to_dict() for n in self.needs]} if self.needs else {}),
            **({"cycle": True} if self.cycle else {}),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Change:
        return cls(
            connection=str(data["connection"]),
            project=str(data["project"]),
            branch=str(data["branch"]),
            ref=str(data["ref"]),
            commit=str(data.get("commit", "")),
            is_branch_update=bool(data.get("is_branch_update", False)),
            needs=tuple(cls.from_dict(dict(n)) for n in data.get("needs") or ()),
            cycle=bool(data.get("cycle", False)),
        )
