"""A stored run is keyed by the code that computed it (specbatch.code_identity): the same
files give the same identity in any process and folder, a changed byte of code or bundled data
another, and the bundled traces, caches and dot-files none (a run is keyed by its trace's own
contents)."""

from __future__ import annotations

import subprocess
import sys

from specbatch.analysis.sweep import points
from specbatch.code_identity import code_identity, files_digest, package_files


def tree(root, files):
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_the_same_contents_under_the_same_names_give_the_same_identity_anywhere(tmp_path):
    files = {"a.py": "x = 1\n", "data/laws.json": "{}", "sub/b.py": "y = 2\n"}
    one = tree(tmp_path / "one", files)
    two = tree(tmp_path / "elsewhere" / "two", files)
    assert files_digest(package_files({"p": one})) == files_digest(package_files({"p": two}))


def test_a_changed_byte_of_code_or_data_changes_it(tmp_path):
    root = tree(tmp_path / "p", {"a.py": "x = 1\n", "data/laws.json": "{}"})
    before = files_digest(package_files({"p": root}))
    (root / "data" / "laws.json").write_text("{ }")
    after_data = files_digest(package_files({"p": root}))
    (root / "a.py").write_text("x = 2\n")
    assert len({before, after_data, files_digest(package_files({"p": root}))}) == 3


def test_caches_dot_files_and_bundled_traces_are_not_part_of_it(tmp_path):
    root = tree(tmp_path / "p", {"a.py": "x = 1\n", "__pycache__/a.pyc": "0",
                                 ".specbatch-result.json": "{}", "data/laws.json": "{}",
                                 "data/tiny/meta.json": "{}", "data/tiny/steps.parquet": "0"})
    assert [name for name, _ in package_files({"p": root})] == ["p/a.py", "p/data/laws.json"]


def test_a_nested_root_is_walked_as_its_own(tmp_path):
    root = tree(tmp_path / "p", {"a.py": "", "sub/b.py": ""})
    names = [name for name, _ in package_files({"outer": root, "inner": root / "sub"})]
    assert names == ["inner/b.py", "outer/a.py"]


def test_the_installed_identity_is_the_same_in_another_process():
    child = subprocess.run([sys.executable, "-c", "from specbatch.code_identity import "
                            "code_identity; print(code_identity())"],
                           capture_output=True, text=True, check=True)
    assert child.stdout.strip() == code_identity()


def test_a_run_key_changes_with_the_code(monkeypatch):
    config = {"target": "vicuna-7b", "seed": 0}
    key = points.run_key(config)
    monkeypatch.setattr(points, "code_version", lambda: "0+other")
    assert points.run_key(config) != key
