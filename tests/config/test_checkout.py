from __future__ import annotations

from pathlib import Path

from scheduler.config import UnparsedBranch, build_layout
from scheduler.config.checkout import candidate_paths, read_checkout
from tests.config.builders import tenant


def test_candidate_paths_from_a_listing() -> None:
    listing = [
        "README",
        "zuul.d/a.yaml",
        "zuul.d/b.txt",
        ".sluice.yaml",
        "ci/x.yaml",
        "../zuul.yaml",
    ]
    assert candidate_paths(listing, ["ci/"]) == [".sluice.yaml", "ci/x.yaml", "zuul.d/a.yaml"]


def test_reads_only_config_and_stays_inside(tmp_path: Path) -> None:
    outside = tmp_path / "outside.yaml"
    outside.write_text("- job: {name: stolen}\n")
    repo = tmp_path / "repo"
    (repo / ".zuul.d" / "sub").mkdir(parents=True)
    (repo / ".zuul.d" / "a.yaml").write_text("- job: {name: a}\n")
    (repo / ".zuul.d" / "sub" / "b.yaml").write_text("- job: {name: b}\n")
    (repo / ".zuul.d" / "link.yaml").symlink_to(outside)
    (repo / ".zuul.d" / "linkdir").symlink_to(tmp_path, target_is_directory=True)
    (repo / ".sluice.yaml").write_bytes(b"- job: {name: \xff}\n")
    (repo / "src.py").write_text("print()\n")
    files = read_checkout(repo)
    assert sorted(files) == [".sluice.yaml", ".zuul.d/a.yaml", ".zuul.d/sub/b.yaml"]
    result = build_layout(tenant(), [UnparsedBranch("app", "main", files)])
    assert [str(e) for e in result.errors if e.path == ".sluice.yaml"] == [
        ".sluice.yaml:1: invalid YAML: unacceptable character #xdcff: "
        "special characters are not allowed"
    ]
    assert "stolen" not in result.layout.jobs


def test_symlinked_root_file_is_skipped(tmp_path: Path) -> None:
    (tmp_path / "secret").write_text("x")
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "zuul.yaml").symlink_to(tmp_path / "secret")
    assert read_checkout(repo) == {}
