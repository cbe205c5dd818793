"""Commits and trees read through a :class:`~workers.merger.catfile.CatFile`.

What a merge asks of git objects, answered in Python from one cat-file
process instead of a git command each:

* :func:`changed_paths`: ``git diff --name-only --no-renames <a> <b>`` of
  two trees;
* :func:`read_config_files`: the config files of a tree, as ``git ls-tree
  -r <tree> -- <config paths>`` and ``git cat-file --batch`` read them.

The object formats themselves (commits, trees, loose objects) are read by
:mod:`workers.gitobjects`, which the executor shares.

Each answers exactly as git does, or not at all: anything it does not
handle the way git would (a missing or malformed object, a tree out of
git's order, a submodule in a diff, whose changes ``.gitmodules`` may tell
git to ignore) makes it return None, and the caller runs the git command.
Trees are read level by level, all the trees of a level in one batch.
"""

from __future__ import annotations

from collections.abc import Iterable, MutableMapping

from workers.gitobjects import TreeEntry, parse_tree
from workers.merger.catfile import CatFile

# Config files read from a tree: single files, and directories read for
# every *.yaml below them.
CONFIG_FILES = ("zuul.yaml", ".zuul.yaml", ".sluice.yaml")
CONFIG_DIRS = ("zuul.d", ".zuul.d")
_CONFIG_NAMES = frozenset(name.encode() for name in (*CONFIG_FILES, *CONFIG_DIRS))

# Larger trees are left to git: parsing one in Python would cost more than
# the git process it spares (about 2 µs an entry, some 2,000 entries here).
_TREE_BYTES = 64 * 1024

# The memo of config files: trees kept per repo, and text kept per tree at most.
_CONFIG_MEMO_TREES = 64
_CONFIG_MEMO_BYTES = 1 << 20


def is_config_path(path: str) -> bool:
    """Whether ``path`` (of a tree, below the config paths) is a config file."""
    if path in CONFIG_FILES:
        return True
    return path.split("/", 1)[0] in CONFIG_DIRS and path.endswith(".yaml")


def read_trees(cat: CatFile, shas: Iterable[str]) -> dict[str, list[TreeEntry]] | None:
    """The entries of each tree, in one batch; None if any is not a readable tree."""
    wanted = list(dict.fromkeys(shas))
    trees: dict[str, list[TreeEntry]] = {}
    for sha, answer in zip(wanted, cat.contents(wanted), strict=True):
        if answer is None or answer[0].kind != "tree" or answer[0].size > _TREE_BYTES:
            return None
        entries = parse_tree(answer[1], len(answer[0].sha) // 2)
        if entries is None:
            return None
        trees[sha] = entries
    return trees


# --------------------------------------------------------------------------
# git diff --name-only --no-renames


def changed_paths(cat: CatFile, old: str, new: str) -> list[bytes] | None:
    """Paths that differ between trees ``old`` and ``new`` (files, recursively).

    What ``git diff --name-only --no-renames`` lists: a file whose blob or
    mode changed, every file below an added or removed directory, and a
    path that changed between file and directory both as a file and as
    the files below it. None if a submodule differs.
    """
    paths: list[bytes] = []
    level: list[tuple[bytes, str | None, str | None]] = [(b"", old, new)]
    while level:
        wanted = [sha for _prefix, *pair in level for sha in pair if sha is not None]
        trees = read_trees(cat, wanted)
        if trees is None:
            return None
        below: list[tuple[bytes, str | None, str | None]] = []
        for prefix, old_sha, new_sha in level:
            before = _keyed(trees[old_sha]) if old_sha is not None else {}
            after = _keyed(trees[new_sha]) if new_sha is not None else {}
            for key in before.keys() | after.keys():
                was, now = before.get(key), after.get(key)
                if was == now:  # same name, mode and object
                    continue
                entry = now if now is not None else was
                assert entry is not None
                if any(e is not None and e.is_gitlink for e in (was, now)):
                    return None  # .gitmodules may tell git to ignore it
                if entry.is_tree:
                    below.append((prefix + entry.name + b"/", _sha(was), _sha(now)))
                else:
                    paths.append(prefix + entry.name)
        level = below
    return paths


def _keyed(entries: list[TreeEntry]) -> dict[tuple[bytes, bool], TreeEntry]:
    """Entries by (name, is a tree): git compares a file and a directory as two paths."""
    return {(entry.name, entry.is_tree): entry for entry in entries}


def _sha(entry: TreeEntry | None) -> str | None:
    return entry.sha if entry is not None else None


# --------------------------------------------------------------------------
# Config files


# The config entries of a root tree (names, modes, object ids) -> its config files.
ConfigMemo = MutableMapping[tuple[TreeEntry, ...], dict[str, str]]


def read_config_files(cat: CatFile, tree: str, memo: ConfigMemo) -> dict[str, str] | None:
    """The config files of ``tree``: path -> text, in ``git ls-tree -r``'s order.

    ``memo`` keeps the files by the root's config entries: a tree whose
    config entries equal those of a tree read before has the same files,
    and they are not read again.
    """
    trees = read_trees(cat, [tree])
    if trees is None:
        return None
    roots = tuple(entry for entry in trees[tree] if entry.name in _CONFIG_NAMES)
    known = memo.get(roots)
    if known is not None:
        return dict(known)
    blobs = _config_blobs(cat, roots)
    if blobs is None:
        return None
    answers = cat.contents([sha for _path, sha in blobs])
    files: dict[str, str] = {}
    for (path, _sha), answer in zip(blobs, answers, strict=True):
        if answer is None or answer[0].kind != "blob":
            return None
        files[path] = answer[1].decode("utf-8", "replace")
    if sum(len(text) for text in files.values()) <= _CONFIG_MEMO_BYTES:
        if len(memo) >= _CONFIG_MEMO_TREES:
            memo.clear()
        memo[roots] = dict(files)
    return files


def _config_blobs(cat: CatFile, roots: tuple[TreeEntry, ...]) -> list[tuple[str, str]] | None:
    """(path, blob sha) of the config files below the root's config entries.

    ``ls-tree -r`` lists blobs (files and symlinks, not submodules), also
    below a directory named like a config file, which :func:`is_config_path`
    then drops: such a directory is not walked at all.
    """
    found: list[tuple[bytes, str]] = []
    dirs = {name.encode() for name in CONFIG_DIRS}
    level = [(b"", entry) for entry in roots if not entry.is_tree or entry.name in dirs]
    while level:
        trees = read_trees(cat, [entry.sha for _prefix, entry in level if entry.is_tree])
        if trees is None:
            return None
        below: list[tuple[bytes, TreeEntry]] = []
        for prefix, entry in level:
            path = prefix + entry.name
            if entry.is_tree:
                below += [(path + b"/", child) for child in trees[entry.sha]]
            elif not entry.is_gitlink:  # ls-tree's "blob": files and symlinks
                found.append((path, entry.sha))
        level = below
    # ls-tree -r walks depth first in tree order: the byte order of the paths
    found.sort()
    decoded = [(path.decode("utf-8", "replace"), sha) for path, sha in found]
    return [(path, sha) for path, sha in decoded if is_config_path(path)]
