"""``specbatch.io``: output paths are checked before any long work, with one-line errors."""

from __future__ import annotations

import pytest

from specbatch.errors import SpecbatchError
from specbatch.io import check_output_dir, prepare_output_dir, prepare_output_file


def test_new_output_dir_is_created_with_parents(tmp_path):
    out = prepare_output_dir(tmp_path / "a" / "b")
    assert out.is_dir()


def test_existing_file_is_refused_naming_the_flag(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(SpecbatchError, match=r"^--out .*f: exists and is not a directory$"):
        prepare_output_dir(tmp_path / "f")
    with pytest.raises(SpecbatchError, match=r"^--dir .*f: exists"):
        check_output_dir(tmp_path / "f", "--dir", allow_existing=True)


def test_a_file_in_the_path_means_the_directory_cannot_be_created(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(SpecbatchError, match="cannot create the directory"):
        prepare_output_dir(tmp_path / "f" / "x" / "y", allow_existing=True)
    assert (tmp_path / "f").read_text() == "x"


def test_uncreatable_directory_is_a_one_line_error():
    with pytest.raises(SpecbatchError, match=r"^--out /proc/specbatch-x: cannot create"):
        prepare_output_dir("/proc/specbatch-x", allow_existing=True)


def test_non_empty_directory_needs_force_or_allow_existing(tmp_path):
    (tmp_path / "keep.txt").write_text("x")
    with pytest.raises(SpecbatchError, match="directory is not empty .*--force"):
        prepare_output_dir(tmp_path)
    assert prepare_output_dir(tmp_path, force=True) == tmp_path
    assert prepare_output_dir(tmp_path, allow_existing=True) == tmp_path
    assert (tmp_path / "keep.txt").read_text() == "x"


def test_check_output_dir_creates_nothing(tmp_path):
    check_output_dir(tmp_path / "new" / "dir")
    assert not (tmp_path / "new").exists()


def test_output_file_suffix_and_parent_are_checked(tmp_path):
    with pytest.raises(SpecbatchError, match=r"--out .*p\.txt: expected a file name ending in "
                                             r"\.parquet or \.csv"):
        prepare_output_file(tmp_path / "p.txt", suffixes=(".parquet", ".csv"))
    (tmp_path / "f").write_text("x")
    with pytest.raises(SpecbatchError, match="is not a directory"):
        prepare_output_file(tmp_path / "f" / "p.csv")
    with pytest.raises(SpecbatchError, match="is a directory"):
        prepare_output_file(tmp_path)
    assert prepare_output_file(tmp_path / "sub" / "p.csv").parent.is_dir()
