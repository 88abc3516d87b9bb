"""``specbatch.io``: output paths are checked before any long work, with one-line errors;
result folders are written whole (the old result or the new one, never a mix) and replace
only a result of their own kind and configuration."""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import time

import pytest

from specbatch import io
from specbatch.errors import SpecbatchError
from specbatch.io import (
    _UMASK,
    RESULT_MARKER,
    check_output_dir,
    check_result_dir,
    dir_lock,
    prepare_output_dir,
    prepare_output_file,
    recover_result_dir,
    result_dir,
)


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


# --- result folders: complete or absent, replacing only what they may ---------------------


def write_result(path, kind="simulate", identity="a", text="new", **kwargs):
    with result_dir(path, kind, identity, **kwargs) as tmp:
        assert tmp.name.startswith(".") and ".tmp-" in tmp.name and tmp != path
        (tmp / "summary.json").write_text(text)
        (tmp / "sub").mkdir()
        (tmp / "sub" / "x").write_text(text)
    return path


def siblings(path):
    return sorted(p.name for p in path.parent.iterdir() if p.name != path.name)


def test_result_dir_creates_the_folder_whole_with_its_marker(tmp_path):
    out = write_result(tmp_path / "a" / "run")
    assert sorted(p.name for p in out.iterdir()) == [RESULT_MARKER, "sub", "summary.json"]
    assert json.loads((out / RESULT_MARKER).read_text()) == {"kind": "simulate", "identity": "a"}
    assert (out / "sub" / "x").read_text() == "new"
    assert siblings(out) == []  # no temporary folder left
    assert out.stat().st_mode & 0o777 == 0o777 & ~_UMASK


def test_a_rerun_of_the_same_identity_replaces_the_whole_folder(tmp_path):
    out = write_result(tmp_path / "run", text="old")
    (out / "stale.txt").write_text("from the old run")
    write_result(out, text="new")
    assert (out / "summary.json").read_text() == "new" and not (out / "stale.txt").exists()
    assert siblings(out) == []


@pytest.mark.parametrize("kind, identity, needle", [
    ("simulate", "b", "holds a simulate result of another configuration (pass --force"),
    ("live", "a", "holds a specbatch simulate result, not a live result"),
])
def test_another_configuration_or_kind_is_refused_and_kept(tmp_path, kind, identity, needle):
    out = write_result(tmp_path / "run", text="old")
    with pytest.raises(SpecbatchError, match=re.escape(needle)):
        write_result(out, kind, identity)
    assert (out / "summary.json").read_text() == "old" and siblings(out) == []


def test_force_replaces_a_result_of_the_kind_but_never_other_files(tmp_path):
    out = write_result(tmp_path / "run", text="old")
    write_result(out, identity="b", force=True)
    assert (out / "summary.json").read_text() == "new"
    foreign = tmp_path / "trace"
    foreign.mkdir()
    for name in ("meta.json", "requests.parquet", "positions-00000.parquet", "z"):
        (foreign / name).write_text("keep")
    with pytest.raises(SpecbatchError, match=r"^--out .*trace: holds files that are not a "
                       r"simulate result \(meta\.json, positions-00000\.parquet, "
                       r"requests\.parquet and 1 more\); choose an empty or new directory$"):
        write_result(foreign, force=True)
    assert all(p.read_text() == "keep" for p in foreign.iterdir())


def test_legacy_results_without_a_marker_are_replaced_only_with_force(tmp_path):
    out = tmp_path / "old"
    out.mkdir()
    (out / "summary.json").write_text("old")
    (out / "fig.png").write_text("old")
    with pytest.raises(SpecbatchError, match="records no configuration .*--force"):
        write_result(out, legacy=("summary.json", "*.png"))
    write_result(out, legacy=("summary.json", "*.png"), force=True)
    assert (out / "summary.json").read_text() == "new" and not (out / "fig.png").exists()


def test_an_error_inside_the_block_leaves_the_old_result_and_no_temporary_folder(tmp_path):
    out = write_result(tmp_path / "run", text="old")
    with pytest.raises(RuntimeError), result_dir(out, "simulate", "a") as tmp:
        (tmp / "summary.json").write_text("half")
        raise RuntimeError("killed half-way")
    assert (out / "summary.json").read_text() == "old" and siblings(out) == []


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="renameat2 is Linux's")
def test_linux_swaps_the_old_and_new_folders_in_one_step(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    (a / "new").touch()
    (b / "old").touch()
    assert io._exchange(a, b)  # a file system without RENAME_EXCHANGE would answer False
    assert [p.name for p in a.iterdir()] == ["old"] and [p.name for p in b.iterdir()] == ["new"]


def test_without_an_atomic_exchange_two_renames_still_replace_the_result(tmp_path, monkeypatch):
    monkeypatch.setattr(io, "_exchange", lambda a, b: False)
    out = write_result(tmp_path / "run", text="old")
    write_result(out, text="new")
    assert (out / "summary.json").read_text() == "new" and siblings(out) == []


def test_a_swap_killed_between_its_two_renames_is_undone_by_the_next_run(tmp_path, monkeypatch):
    out = write_result(tmp_path / "run", text="old")
    monkeypatch.setattr(io, "_exchange", lambda a, b: False)
    real_rename = os.rename
    calls = []

    def rename_then_die(src, dst):
        calls.append(dst)
        if len(calls) == 2:
            raise KeyboardInterrupt  # stands in for a kill after the old one moved away
        real_rename(src, dst)

    monkeypatch.setattr(io.os, "rename", rename_then_die)
    with pytest.raises(KeyboardInterrupt):
        write_result(out, text="new")
    monkeypatch.setattr(io.os, "rename", real_rename)
    assert not out.exists() and any(".old-" in name for name in siblings(out))
    recover_result_dir(out)
    assert (out / "summary.json").read_text() == "old" and siblings(out) == []


def test_recovery_deletes_dead_writers_folders_but_not_a_live_ones(tmp_path):
    out = write_result(tmp_path / "run", text="old")
    dead = tmp_path / ".run.tmp-dead"
    dead.mkdir()
    (dead / "summary.json").write_text("half")
    live = tmp_path / ".run.tmp-live"
    live.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", HOLD_FLOCK, str(live)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        recover_result_dir(out)
        assert siblings(out) == [".run.tmp-live"]
    finally:
        holder.kill()
        holder.wait()
    recover_result_dir(out)
    assert siblings(out) == [] and (out / "summary.json").read_text() == "old"


HOLD_FLOCK = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDONLY)
fcntl.flock(fd, fcntl.LOCK_EX)
print("locked", flush=True)
time.sleep(60)
"""


def test_a_symbolic_link_keeps_pointing_at_the_new_result(tmp_path):
    target = write_result(tmp_path / "real", text="old")
    link = tmp_path / "link"
    link.symlink_to(target)
    write_result(link, text="new")
    assert link.is_symlink() and (link / "summary.json").read_text() == "new"


def test_unusable_result_paths_are_one_line_errors(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(SpecbatchError, match=r"^--out .*f: exists and is not a directory$"):
        check_result_dir(tmp_path / "f", "simulate", "a")
    with pytest.raises(SpecbatchError, match="cannot create the directory"):
        check_result_dir(tmp_path / "f" / "x", "simulate", "a")
    with pytest.raises(SpecbatchError, match="name is too long"):
        check_result_dir(tmp_path / ("n" * 300), "simulate", "a")
    with pytest.raises(SpecbatchError, match=r"^--out /proc/specbatch-x: cannot create the "
                       r"directory \("):
        check_result_dir("/proc/specbatch-x", "simulate", "a")
    assert (tmp_path / "f").read_text() == "x"


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_a_read_only_parent_is_a_one_line_error(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        with pytest.raises(SpecbatchError, match=r"Permission denied"):
            write_result(ro / "run")
    finally:
        ro.chmod(0o755)


def test_the_current_folder_or_one_above_it_is_refused(tmp_path, monkeypatch):
    here = tmp_path / "empty"
    here.mkdir()
    monkeypatch.chdir(here)
    for spelling in (".", "..", str(here), "sub/.."):
        with pytest.raises(SpecbatchError, match="is the current directory or above it"):
            check_result_dir(spelling, "simulate", "a")
    assert check_result_dir("sub", "simulate", "a") == here / "sub"


def test_a_folder_that_cannot_be_written_is_a_one_line_error(tmp_path, monkeypatch):
    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(io.tempfile, "mkdtemp", refuse)  # what a read-only folder does, as root
    with pytest.raises(SpecbatchError, match=r"^--out .*run: cannot create the directory "
                       r"\(Permission denied\)$"):
        write_result(tmp_path / "run")


HOLD_DIR_LOCK = """
import sys, time
from specbatch.io import dir_lock
with dir_lock(sys.argv[1], what="sweep"):
    print("locked", flush=True)
    time.sleep(60)
"""


def test_dir_lock_refuses_a_second_process_until_the_first_is_gone(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", HOLD_DIR_LOCK, str(tmp_path)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(SpecbatchError, match=rf"^--out .*: another sweep \(pid "
                           rf"{holder.pid}\) is running on it; wait for it"):
            with dir_lock(tmp_path, what="sweep"):
                pass
    finally:
        holder.kill()  # a killed holder leaves no lock behind
        holder.wait()
    with dir_lock(tmp_path, what="sweep"):
        pass


#: Replaces OUT with a result of three files written 0.05 s apart (printing "write" before
#: each), holding the text given as the second argument.
SLOW_RESULT = """
import sys, time
from pathlib import Path
from specbatch.io import result_dir
out, text = Path(sys.argv[1]), sys.argv[2]
with result_dir(out, "simulate", "a") as tmp:
    for name in ("a", "b", "c"):
        print("write", flush=True)
        time.sleep(0.05)
        (tmp / name).write_text(text)
print("done", flush=True)
"""


def test_kill_9_at_any_moment_leaves_the_old_or_the_new_result_whole(tmp_path):
    out = tmp_path / "run"
    script = [sys.executable, "-c", SLOW_RESULT, str(out)]
    subprocess.run([*script, "0"], check=True, capture_output=True)
    rng = random.Random(0)
    outcomes = set()
    for attempt in range(1, 13):
        proc = subprocess.Popen([*script, str(attempt)], stdout=subprocess.PIPE, text=True)
        for _ in range(rng.randint(0, 4)):  # 3 writes, then "done" after the swap
            proc.stdout.readline()
        time.sleep(rng.uniform(0.0, 0.06))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        texts = {(out / name).read_text() for name in ("a", "b", "c")}
        assert sorted(p.name for p in out.iterdir()) == [RESULT_MARKER, "a", "b", "c"]
        assert len(texts) == 1  # one whole result, never a mix
        outcomes.add(texts.pop() == str(attempt))
    assert outcomes == {True, False}
    recover_result_dir(out)
    assert [p.name for p in tmp_path.iterdir()] == ["run"]


def test_atomic_write_writes_bytes_text_and_a_writer_with_the_usual_mode(tmp_path):
    from pathlib import Path

    from specbatch.io import _FILE_MODE, atomic_write

    atomic_write(tmp_path / "a" / "b.bin", b"\x00\xff")
    atomic_write(tmp_path / "c.txt", "é\n")
    atomic_write(tmp_path / "d.txt", lambda tmp: Path(tmp).write_bytes(b"by path"))
    assert (tmp_path / "a" / "b.bin").read_bytes() == b"\x00\xff"
    assert (tmp_path / "c.txt").read_bytes() == "é\n".encode()
    assert (tmp_path / "d.txt").read_bytes() == b"by path"
    for p in (tmp_path / "a" / "b.bin", tmp_path / "c.txt", tmp_path / "d.txt"):
        assert p.stat().st_mode & 0o777 == _FILE_MODE
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "c.txt", "d.txt"]  # no temp


def test_atomic_write_that_fails_leaves_the_old_file_and_no_temp(tmp_path):
    from specbatch.io import atomic_write

    atomic_write(tmp_path / "x", b"old")
    with pytest.raises(ZeroDivisionError):
        atomic_write(tmp_path / "x", lambda tmp: 1 / 0)
    assert [p.name for p in tmp_path.iterdir()] == ["x"]
    assert (tmp_path / "x").read_bytes() == b"old"
