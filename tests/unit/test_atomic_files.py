"""why_unwritable: an output path tried before a session measures anything."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_tfperf.storage.atomic_files import why_unwritable


def test_a_writable_path_passes_and_leaves_nothing_behind(tmp_path: Path) -> None:
    assert why_unwritable(tmp_path / "out.json") is None
    assert why_unwritable(tmp_path / "not" / "yet" / "out.json") is None  # the writers create folders
    assert why_unwritable(tmp_path / "baselines", directory=True) is None
    assert list(tmp_path.iterdir()) == []


def test_a_file_in_place_of_a_folder_is_named(tmp_path: Path) -> None:
    (tmp_path / "blocker").write_text("")
    assert why_unwritable(tmp_path / "blocker" / "out.json") == f"{tmp_path / 'blocker'} is not a directory"
    assert why_unwritable(tmp_path / "blocker" / "a" / "b.json") == f"{tmp_path / 'blocker'} is not a directory"
    assert why_unwritable(tmp_path / "blocker", directory=True) == f"{tmp_path / 'blocker'} is not a directory"


def test_a_directory_where_a_file_goes_is_refused(tmp_path: Path) -> None:
    assert why_unwritable(tmp_path) == "it is a directory"


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc")
def test_a_folder_where_no_file_can_be_created_is_found_by_trying_even_as_root() -> None:
    # Mode bits would let root through; creating a file in /proc fails for everyone.
    assert why_unwritable("/proc/r.html") == "creating a file in /proc failed: No such file or directory"


def test_an_existing_file_written_in_place_is_left_as_it_was(tmp_path: Path) -> None:
    summary = tmp_path / "summary.md"
    summary.write_text("earlier steps\n")
    assert why_unwritable(summary, in_place=True) is None
    assert summary.read_text() == "earlier steps\n"
