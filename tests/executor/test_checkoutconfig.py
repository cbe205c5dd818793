"""The worker's git configuration decides who checks out (workers/executor/checkoutconfig.py).

Where the global or system configuration could change the files (line
ends, attributes, symlinks, hooks), git checks out, honouring it, as it
always did; anything else keeps the checkout in-process, with the same
files git would write.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.executor.helpers import Repo
from tests.executor.trees import listing, reference
from workers.executor import checkoutconfig
from workers.executor.checkoutconfig import neutral, neutral_text
from workers.executor.workspace import checkout

CONVERTING = {
    "autocrlf": "[core]\n\tautocrlf = true\n",
    "symlinks": "[core]\n\tsymlinks = false\n",
    "attributes-file": "[core]\n\tattributesFile = {home}/attributes\n",
    "hooks": "[core]\n\thooksPath = {home}/hooks\n",
    "include": "[include]\n\tpath = {home}/more.gitconfig\n",
}
NEUTRAL = {
    "autocrlf-input": "[core]\n\tautocrlf = input\n",
    "lfs": '[filter "lfs"]\n\tsmudge = git-lfs smudge -- %f\n\trequired = true\n',
    "user-and-editor": "[user]\n\tname = Someone\n[core]\n\teditor = vim\n\tpager = less\n",
    "eol-lf": "[core]\n\teol = lf\n\tsymlinks = true\n",
}


@pytest.fixture
def home() -> Path:
    """The tests' HOME (conftest's git_env), with no git config yet."""
    return Path(os.environ["HOME"])


def project(repo: Repo) -> str:
    repo.write("README", "one\ntwo\n")
    repo.symlink("link", "README")
    repo.script("run.sh", "true")
    return repo.commit()


@pytest.mark.parametrize("case", sorted(CONVERTING))
def test_a_global_config_that_may_convert_files_leaves_the_checkout_to_git(
    tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch, fast_path: list[bool], case: str
) -> None:
    repo = Repo.create(tmp_path / "source")
    commit = project(repo)
    (home / ".gitconfig").write_text(CONVERTING[case].format(home=home))
    (home / "attributes").write_text("* text eol=crlf\n")
    (home / "more.gitconfig").write_text("[core]\n\tautocrlf = true\n")

    checkout(str(repo.path), tmp_path / "work", {"main": commit}, "main")

    assert fast_path == [False]
    readme = (tmp_path / "work" / "README").read_bytes()
    converted = case in ("autocrlf", "attributes-file", "include")
    assert readme == (b"one\r\ntwo\r\n" if converted else b"one\ntwo\n")
    assert (tmp_path / "work" / "link").is_symlink() == (case != "symlinks")


def test_global_attributes_leave_the_checkout_to_git(
    tmp_path: Path, home: Path, fast_path: list[bool]
) -> None:
    repo = Repo.create(tmp_path / "source")
    commit = project(repo)
    (home / ".config" / "git").mkdir(parents=True)
    (home / ".config" / "git" / "attributes").write_text("* text eol=crlf\n")

    checkout(str(repo.path), tmp_path / "work", {"main": commit}, "main")

    assert fast_path == [False]
    assert (tmp_path / "work" / "README").read_bytes() == b"one\r\ntwo\r\n"


def test_git_c_in_the_environment_leaves_the_checkout_to_git(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fast_path: list[bool]
) -> None:
    repo = Repo.create(tmp_path / "source")
    commit = project(repo)
    for name, value in (("COUNT", "1"), ("KEY_0", "core.autocrlf"), ("VALUE_0", "true")):
        monkeypatch.setenv(f"GIT_CONFIG_{name}", value)

    checkout(str(repo.path), tmp_path / "work", {"main": commit}, "main")

    assert fast_path == [False]
    assert (tmp_path / "work" / "README").read_bytes() == b"one\r\ntwo\r\n"


@pytest.mark.parametrize("case", sorted(NEUTRAL))
def test_a_neutral_global_config_keeps_the_checkout_in_process(
    tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch, fast_path: list[bool], case: str
) -> None:
    repo = Repo.create(tmp_path / "source")
    commit = project(repo)
    (home / ".gitconfig").write_text(NEUTRAL[case])
    reference(repo, tmp_path / "git", commit, monkeypatch)

    checkout(str(repo.path), tmp_path / "work", {"main": commit}, "main")

    assert fast_path == [True]
    assert listing(tmp_path / "work") == listing(tmp_path / "git")


def test_the_system_config_counts_unless_git_is_told_to_skip_it(tmp_path: Path) -> None:
    system = tmp_path / "gitconfig"
    system.write_text("[core]\n\tautocrlf = true\n")
    environ = {"HOME": str(tmp_path), "GIT_CONFIG_SYSTEM": str(system), "PATH": os.defpath}

    assert not neutral(environ)
    assert neutral({**environ, "GIT_CONFIG_NOSYSTEM": "1"})
    system.write_text("[core]\n\tautocrlf = false\n")
    assert neutral(environ)  # a changed file is read again


def test_a_global_config_file_replaces_the_home_ones(tmp_path: Path) -> None:
    (tmp_path / ".gitconfig").write_text("[core]\n\tautocrlf = true\n")
    environ = {"HOME": str(tmp_path), "GIT_CONFIG_NOSYSTEM": "1", "PATH": os.defpath}

    assert not neutral(environ)
    assert neutral({**environ, "GIT_CONFIG_GLOBAL": os.devnull})
    (tmp_path / ".config" / "git").mkdir(parents=True)
    (tmp_path / ".config" / "git" / "config").write_text("[core]\n\tsymlinks = no\n")
    assert not neutral({**environ, "GIT_CONFIG_GLOBAL": ""})  # empty: the usual files
    assert not neutral({**environ, "XDG_CONFIG_HOME": str(tmp_path / "elsewhere")})


def test_the_answer_is_kept_until_a_file_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    environ = {"HOME": str(tmp_path), "GIT_CONFIG_NOSYSTEM": "1", "PATH": os.defpath}
    (tmp_path / ".gitconfig").write_text("[user]\n\tname = x\n")
    read: list[str] = []
    real = checkoutconfig._neutral_file
    monkeypatch.setattr(
        checkoutconfig, "_neutral_file", lambda path: read.append(path) or real(path)
    )
    checkoutconfig._answers.clear()

    assert neutral(environ) and neutral(environ)
    assert read == [str(tmp_path / ".config" / "git" / "config"), str(tmp_path / ".gitconfig")]
    (tmp_path / ".gitconfig").write_text("[core]\n\tautocrlf = yes\n")
    assert not neutral(environ)


@pytest.mark.parametrize(
    "text",
    [
        "[core]\n\tautocrlf = true",
        "[Core]\n\tAutoCRLF=TRUE",
        "[core] autocrlf = true",
        "[core]\n\tautocrlf",  # a bare key is true
        "[core]\n\tautocrlf = true # comment",
        "[core]\n\tautocrlf = true;comment",
        '[core]\n\tautocrlf = "true"',  # quoted: not read here
        "[core]\n\tautocrlf = tr\\\nue",  # continued: not read here
        "[core]\n\tsymlinks = false",
        "[core]\n\tignoreCase = true",
        "[core]\n\tsparseCheckout = true",
        "[core]\n\thooksPath = /x",
        "[core]\n\tworktree = /x",
        "[core]\n\teol = crlf",
        "[core]\n\tprotectHFS = true",
        '[includeIf "gitdir:/x/"]\n\tpath = y',
        "[include]\n\tpath = y",
        "[core\n\tautocrlf = false",  # malformed: not read here
        "[core]\n\t= x",
    ],
)
def test_config_texts_that_may_change_a_checkout(text: str) -> None:
    assert not neutral_text(text)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "# [core] autocrlf = true\n; autocrlf = true",
        "[core]\n\tautocrlf = false\n\tautocrlf = input\n\tsymlinks\n\teol = native",
        "[core]\n\tignorecase = no\n\tprotectNTFS = false\n\tfilemode = false",
        '[core "sub"]\n\tautocrlf = true',  # not core.autocrlf
        "[core.sub]\n\tautocrlf = true",
        '[filter "lfs"]\n\tsmudge = git-lfs smudge -- %f\n\tprocess = git-lfs filter-process',
        '[url "git@host:"]\n\tinsteadOf = https://host/\n[credential]\n\thelper = store',
        "[user]\n\tname = Someone # [core] autocrlf = true",
    ],
)
def test_config_texts_that_change_nothing(text: str) -> None:
    assert neutral_text(text)
