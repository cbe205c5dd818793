"""The merger's own refs in a cache repo, kept for its last jobs only.

Every merge job writes refs into its repo: ``refs/sluice/jobs/<job id>/``
(the changes its fetch wrote) and the memo ``refs/sluice/memo/<key>`` of
each merge it made (the state after a change; the last of a branch is its
final tip); it holds the memo refs it found without writing them again.
Nothing reads a job's refs by name once the job has ended
(``docs/merger.md``, "Which refs are kept, and how long"), but many steps
of the next merges cost time per ref: a fetch reads every ref and the
commit of each, and its connectivity check walks them all. So a repo
keeps the refs of its newest jobs that fit in :data:`KEEP_REFS` refs (the
newest job's always), and the memo refs those jobs wrote or hold; a merge
then costs the same in a repo that served ten thousand jobs as in one
that served ten.

**How.** A journal in the bare repo, ``sluice-jobs``: the jobs whose refs
the repo holds, oldest first, each with its number of refs and the memo
keys it wrote or holds. A job is entered before a fetch writes its first
ref (:meth:`JobRefs.enter`) and becomes the newest in the ref transaction
that writes its refs (:meth:`JobRefs.plan`); that same transaction
(through ``git update-ref --stdin``, :mod:`.reftx`) deletes the refs of
the jobs beyond the window and the memo refs no kept job wrote or holds,
so dropping costs no git process. Which refs a dropped job has is read
from the repo's files (:func:`~workers.merger.branchrefs.read_refs`;
``for-each-ref`` where they hold anything unusual). A job id is opaque:
the order is that of the journal, never of the ids.

**Across processes.** The journal is read and written under the repo's
lock only (and read once per lock). Refs no entry names (written by an
older version, by a process killed between its ref transaction and its
journal write, or with the journal lost or torn) are found by a scan of
the refs on the first use of the repo in each process, and whenever the
journal is missing or unreadable. They enter the journal as its oldest
entries and go first, :data:`DROP_AT_ONCE` refs or so per transaction, so
a repo with thousands of old refs is cleaned over some merges, none of
them slow.

**Errors.** The journal is bookkeeping: a journal that cannot be written
is logged and the merge goes on (the next use of the repo in this process
scans the refs again); one that does not parse is rebuilt by a scan.
"""

from __future__ import annotations

import logging
import os
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from workers.merger.branchrefs import read_refs
from workers.merger.names import JOBS_NAMESPACE, MEMO_NAMESPACE, job_prefix, memo_ref

log = logging.getLogger(__name__)

# Refs a cache repo keeps for its last jobs (their own refs and the memo
# refs they wrote or hold), always those of the newest job. Every ref costs
# each later merge some 50 µs of CPU, most of it in the fetch (docs/merger.md).
# A gate's item n finds the memo of the items ahead, which the job of item
# n - 1 holds (one ref of its own, its merge's memo ref; the memo refs it
# holds count once): 128 keep it for a gate twenty deep while fifty check
# merges of the project (2 refs each: the change, the merge) run in between.
KEEP_REFS = 128
# Refs deleted at most per transaction beyond what the window needs (old
# refs found by a scan): deleting a ref costs git some 0.4 ms here.
DROP_AT_ONCE = 500
JOURNAL = "sluice-jobs"
_HEADER = "# sluice job refs 1"
_END = "# end"
# The entry of memo refs that no known job wrote (found by a scan).
NO_JOB = "-"
_MEMO_PER_STRAY_ENTRY = 100
_MEMO_KEY = re.compile(r"[0-9a-f]{64}")
_JOB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
# The lines of the journal's entries: a job (or NO_JOB), its ref count, its memo keys.
_ENTRIES = re.compile(
    rf"(?:(?:{re.escape(NO_JOB)}|{_JOB_ID.pattern}) [0-9]+(?: {_MEMO_KEY.pattern})*\n)*"
)

# Names of the refs under a prefix, from git (for-each-ref).
ListRefs = Callable[[str], list[str]]


class Entry(NamedTuple):
    """A job whose refs the repo holds: how many, besides the memo keys it wrote or holds."""

    job: str
    refs: int = 0
    memo: tuple[str, ...] = ()


@dataclass(frozen=True)
class Plan:
    """One ref transaction: its ``update-ref --stdin`` lines, and the journal after it."""

    lines: str
    journal: tuple[Entry, ...]
    deleted: int


class JobRefs:
    """The journal of one cache repo, as one process sees it (used under the repo's lock)."""

    def __init__(self, path: Path, keep: int = KEEP_REFS) -> None:
        self.path = path
        self.keep = keep
        self._scanned = False
        # The entries as last read or written, while the lock is held: no
        # other process writes the journal meanwhile.
        self._held: list[Entry] | None = None

    def release(self) -> None:
        """The repo's lock is released: read the journal afresh next time."""
        self._held = None

    def enter(self, jobs: Sequence[tuple[str, int]], list_refs: ListRefs) -> None:
        """Enter each ``(job id, refs)`` as the newest jobs, in order, before a fetch writes them.

        ``refs`` is how many of its refs the fetch writes; one journal write for all.
        """
        entries = self._load(list_refs)
        if [e.job for e in entries[-len(jobs) :]] == [job for job, _refs in jobs]:
            return
        for job_id, refs in jobs:
            previous = _entry_of(entries, job_id)
            entries = [e for e in entries if e.job != job_id]
            entries.append(Entry(job_id, max(refs, previous.refs), previous.memo))
        self._write(entries)

    def overdue(self, list_refs: ListRefs) -> bool:
        """Whether the refs are twice the window: fetches and no merge for long.

        Drops happen in the ref transactions of merges; a repo that sees
        only fetches (files-changes jobs) needs a transaction of its own.
        """
        return _beyond(self._load(list_refs), 2 * self.keep) > 0

    def plan(
        self,
        job_id: str | None,
        refs: Mapping[str, str],
        list_refs: ListRefs,
        *,
        held: Sequence[str] = (),
    ) -> Plan:
        """The transaction that writes ``refs`` of ``job_id`` and drops the jobs beyond the window.

        ``job_id`` becomes the newest entry, with the memo keys among
        ``refs`` and those of the memo refs ``held`` (found and kept, not
        written again); its own refs are those its fetch wrote
        (:meth:`enter`) or ``refs`` outside the memo, whichever are more.
        The memo keys of an earlier run of it that it no longer holds go,
        unless a kept job holds them too. Without a job, the transaction
        only drops.
        """
        entries = self._load(list_refs)
        previous = Entry(NO_JOB)
        if job_id is not None:
            previous = _entry_of(entries, job_id)
            written = [r for r in refs if r.startswith(MEMO_NAMESPACE)]
            keys = (r[len(MEMO_NAMESPACE) :] for r in (*held, *written))
            memo = tuple(dict.fromkeys(keys))
            own = max(previous.refs, len(refs) - len(written))
            entries = [e for e in entries if e.job != job_id]
            entries.append(Entry(job_id, own, memo))
        beyond = _beyond(entries, self.keep)
        dropped = 0
        deletes: list[str] = []
        while dropped < beyond and (dropped < 2 or len(deletes) < DROP_AT_ONCE):
            entry = entries[dropped]
            if entry.job != NO_JOB:
                deletes += self._refs(job_prefix(entry.job), list_refs)
            deletes += [memo_ref(key) for key in entry.memo]
            dropped += 1
        kept = entries[dropped:]
        deletes += [memo_ref(key) for key in previous.memo]
        kept_memo = {memo_ref(key) for entry in kept for key in entry.memo}
        gone = [r for r in dict.fromkeys(deletes) if r not in kept_memo and r not in refs]
        lines = "".join(f"update {ref} {sha}\n" for ref, sha in refs.items())
        lines += "".join(f"delete {ref}\n" for ref in gone)
        return Plan(lines, tuple(kept), len(gone))

    def done(self, plan: Plan) -> None:
        """Record the journal of a transaction git carried out."""
        self._write(plan.journal)

    # ------------------------------------------------------------------
    # The journal

    @property
    def journal_path(self) -> Path:
        return self.path / JOURNAL

    def _load(self, list_refs: ListRefs) -> list[Entry]:
        if self._held is not None:
            return list(self._held)
        entries = self._read()
        if entries is None or not self._scanned:
            found = self._with_strays(entries or [], list_refs)
            self._scanned = True
            if entries is None or len(found) > len(entries):
                self._write(found)  # kept even if the transaction that follows fails
            entries = found
        self._held = list(entries)
        return entries

    def _read(self) -> list[Entry] | None:
        """The journal's entries, oldest first; None when missing or unreadable."""
        try:
            text = self.journal_path.read_text(encoding="ascii")
        except (OSError, UnicodeDecodeError):
            return None
        start = len(_HEADER) + 1
        stop = text.find(f"\n{_END}\n", start - 1)
        if not text.startswith(f"{_HEADER}\n") or stop < 0:
            return None  # missing, or torn by a crash
        body = text[start : stop + 1]  # what follows the end line is left over, if any
        if not _ENTRIES.fullmatch(body):
            return None
        fields = (line.split(" ") for line in body.splitlines())
        return [Entry(f[0], int(f[1]), tuple(f[2:])) for f in fields]

    def _write(self, entries: Sequence[Entry]) -> None:
        """Overwrite the journal in place (what follows the end line, if it shrank, is ignored).

        Not a new file renamed over it: ext4 flushes the data of a file
        renamed over another, a millisecond per merge; a journal torn by a
        crash of the host reads as unreadable, and a scan rebuilds it.
        """
        lines = (" ".join((e.job, str(e.refs), *e.memo)) for e in entries)
        data = "\n".join((_HEADER, *lines, _END, "")).encode("ascii")
        self._held = list(entries)
        try:
            fd = os.open(self.journal_path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                os.pwrite(fd, data, 0)
                os.ftruncate(fd, len(data))
            finally:
                os.close(fd)
        except OSError as exc:
            log.warning("%s: journal not written (%s); refs scanned at next use", self.path, exc)
            self._scanned = False

    # ------------------------------------------------------------------
    # The refs

    def _with_strays(self, entries: list[Entry], list_refs: ListRefs) -> list[Entry]:
        """``entries`` after the jobs and memo refs of the repo that no entry names."""
        known = {e.job for e in entries}
        jobs = Counter(
            ref[len(JOBS_NAMESPACE) :].split("/", 1)[0]
            for ref in self._refs(JOBS_NAMESPACE, list_refs)
        )
        strays = [Entry(job, n) for job, n in sorted(jobs.items()) if job not in known]
        strays = [e for e in strays if _JOB_ID.fullmatch(e.job)]
        known_memo = {key for e in entries for key in e.memo}
        memo = sorted(
            key
            for key in (ref[len(MEMO_NAMESPACE) :] for ref in self._refs(MEMO_NAMESPACE, list_refs))
            if key not in known_memo and _MEMO_KEY.fullmatch(key)
        )
        for start in range(0, len(memo), _MEMO_PER_STRAY_ENTRY):
            strays.append(Entry(NO_JOB, 0, tuple(memo[start : start + _MEMO_PER_STRAY_ENTRY])))
        if strays:
            found = sum(e.refs + len(e.memo) for e in strays)
            log.info("%s: %d refs that no job of the journal wrote, to drop", self.path, found)
        return strays + entries

    def _refs(self, prefix: str, list_refs: ListRefs) -> list[str]:
        found = read_refs(self.path, prefix.encode())
        if found is None:
            return list_refs(prefix)
        return [name.decode() for name in found]


def _entry_of(entries: Iterable[Entry], job_id: str) -> Entry:
    return next((e for e in entries if e.job == job_id), Entry(job_id))


def _beyond(entries: list[Entry], budget: int) -> int:
    """How many of ``entries`` (oldest first) are beyond the newest ones whose refs fit ``budget``.

    The newest entry is always kept; memo keys that several entries wrote
    count once.
    """
    total = 0
    memo: set[str] = set()
    for position in range(len(entries) - 1, -1, -1):
        entry = entries[position]
        total += entry.refs + sum(1 for key in entry.memo if key not in memo)
        memo.update(entry.memo)
        if total > budget and position < len(entries) - 1:
            return position + 1
    return 0
