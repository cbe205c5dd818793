from __future__ import annotations

from scheduler.config import select_config_files


def test_zuul_yaml_wins_over_everything_else() -> None:
    files = {
        "zuul.yaml": "",
        "zuul.d/a.yaml": "",
        ".zuul.yaml": "",
        "README": "",
    }
    selection = select_config_files(files)
    assert selection.paths == ("zuul.yaml",)
    assert selection.ignored == ("zuul.d/a.yaml", ".zuul.yaml")


def test_directory_files_load_sorted_and_only_yaml() -> None:
    files = {
        ".zuul.d/b.yaml": "",
        ".zuul.d/a.yaml": "",
        ".zuul.d/sub/c.yaml": "",
        ".zuul.d/notes.txt": "",
    }
    assert select_config_files(files).paths == (
        ".zuul.d/a.yaml",
        ".zuul.d/b.yaml",
        ".zuul.d/sub/c.yaml",
    )


def test_sluice_file_is_added_last_with_extra_paths_before_it() -> None:
    files = {".sluice.yaml": "", "zuul.d/x.yaml": "", "ci/extra.yaml": "", "more/a.yaml": ""}
    selection = select_config_files(files, ("ci/extra.yaml", "more/"))
    assert selection.paths == ("zuul.d/x.yaml", "ci/extra.yaml", "more/a.yaml", ".sluice.yaml")


def test_sluice_file_alone() -> None:
    assert select_config_files({".sluice.yaml": ""}).paths == (".sluice.yaml",)


def test_unsafe_paths_are_refused() -> None:
    selection = select_config_files({"zuul.d/../../etc/passwd.yaml": "", "zuul.yaml": ""})
    assert selection.paths == ("zuul.yaml",)
    assert selection.refused == (
        ("zuul.d/../../etc/passwd.yaml", "must not contain '.', '..' or empty segments"),
    )
