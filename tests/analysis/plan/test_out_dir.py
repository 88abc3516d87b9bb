"""The planner's output folder: claimed by one question, refused to anything else before a
byte is written, one plan at a time, and a cache folder when none is given."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from specbatch.analysis.plan.out_dir import (
    MARKER,
    check_plan_dir,
    claimed_plan_dir,
    default_out,
    question_identity,
)
from specbatch.analysis.plan.planner import Question
from specbatch.analysis.plan.slo import Slos
from specbatch.analysis.plan.space import Space
from specbatch.errors import SpecbatchError
from specbatch.simulator.workload.lengths import parse_lengths

BASE = {"trace": "default", "requests": 16, "arrival": "poisson", "rate": 2.0,
        "target": "vicuna-33b", "draft": "vicuna-68m", "seed": 0}


def question(**changes) -> Question:
    fields = {"base": BASE, "space": Space(policies=("ar",)), "slos": Slos(tpot=0.1),
              "lengths": (parse_lengths("fixed:100", "p"), parse_lengths("fixed:20", "o")),
              **changes}
    return Question(**fields)


def snapshot(folder) -> dict:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*")
            if p.is_file()}


def test_the_identity_follows_the_question_not_the_execution():
    assert question_identity(question()) == question_identity(question(prune=False))
    other = [question(lengths=(parse_lengths("fixed:100", "p"), parse_lengths("fixed:21", "o"))),
             question(slos=Slos(tpot=0.2)), question(space=Space(policies=("ar", "fixed"))),
             question(base={**BASE, "rate": 3.0}), question(levels_after=2),
             question(band=(0.5, 0.9))]
    ids = {question_identity(q) for q in other} | {question_identity(question())}
    assert len(ids) == len(other) + 1


def test_a_workload_file_and_a_model_config_count_by_their_contents(tmp_path):
    workload, config = tmp_path / "w.csv", tmp_path / "config.json"
    workload.write_text("prompt_len,output_len\n10,5\n")
    config.write_text('{"hidden_size": 64}')
    q = question(lengths=None, base={**BASE, "workload": str(workload), "target": str(config)})
    first = question_identity(q)
    workload.write_text("prompt_len,output_len\n10,6\n")
    second = question_identity(q)
    config.write_text('{"hidden_size": 128}')
    assert len({first, second, question_identity(q)}) == 3


@pytest.mark.parametrize("names", [["workload.csv", "plan.toml", "frontier.png"], ["notes.txt"],
                                   ["plan.json"], ["runs/x.json"]])
def test_a_folder_of_the_users_files_is_refused_and_left_byte_for_byte(tmp_path, names):
    for name in names:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"mine " + name.encode())
    before = snapshot(tmp_path)
    with pytest.raises(SpecbatchError, match="not a plan's"):
        with claimed_plan_dir(tmp_path, question()):
            raise AssertionError("must not be entered")
    assert snapshot(tmp_path) == before and len(list(tmp_path.rglob("*"))) == len(
        {*names, *(n.split("/")[0] for n in names)})


def test_another_questions_folder_is_refused_before_anything_is_written(tmp_path):
    out = tmp_path / "p"
    with claimed_plan_dir(out, question()) as folder:
        (folder / "workload.csv").write_text("the first plan's")
    before = snapshot(out)
    other = question(lengths=(parse_lengths("fixed:300", "p"), parse_lengths("fixed:20", "o")))
    with pytest.raises(SpecbatchError, match="another question .*lengths fixed:100 / fixed:20"):
        with claimed_plan_dir(out, other):
            raise AssertionError("must not be entered")
    assert snapshot(out) == before
    with claimed_plan_dir(out, question()):  # the same question resumes there
        pass
    assert check_plan_dir(out, question_identity(question())) == out


def test_a_second_plan_while_one_runs_is_refused(tmp_path):
    out = tmp_path / "p"
    with claimed_plan_dir(out, question()):
        pass
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import sys
            from specbatch.io import dir_lock
            with dir_lock({str(out)!r}, what="plan"):
                print("held", flush=True)
                sys.stdin.read()
        """)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(SpecbatchError, match="another plan .* is running on it"):
            with claimed_plan_dir(out, question()):
                raise AssertionError("must not be entered")
    finally:
        holder.communicate("", timeout=30)
    assert (out / MARKER).exists()


def test_without_out_a_plan_goes_to_the_cache_named_by_its_question(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECBATCH_CACHE", str(tmp_path))
    assert default_out(question()) == tmp_path / "plan" / question_identity(question())
