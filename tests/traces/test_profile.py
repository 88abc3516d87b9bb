"""Latency profiles (traces/profile.py): the grid is measured, the columns are the DESIGN.md
profile's, named shapes and model dirs both work, and bad input is a one-line error."""

from __future__ import annotations

import pandas as pd
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from theory.errors import SpecbatchError  # noqa: E402
from traces.profile import PROFILE_COLUMNS, ProfileGrid, profile_model, write_profile  # noqa: E402

GRID = ProfileGrid(batch_sizes=(1, 2), query_tokens=(1, 3), kv_tokens=(0, 16), warmup=1,
                   repeats=2)


def test_profile_of_a_named_shape_covers_the_grid(tmp_path):
    frame = profile_model("vicuna-68m", GRID, layers=1)
    assert tuple(frame.columns) == PROFILE_COLUMNS
    assert len(frame) == 8
    assert set(frame["model"]) == {"vicuna-68m@1L"}
    assert set(zip(frame.batch_size, frame.query_tokens, frame.kv_tokens)) == {
        (b, q, kv) for b in (1, 2) for q in (1, 3) for kv in (0, 16)}
    assert (frame["latency_s"] > 0).all()
    assert (frame["latency_min_s"] <= frame["latency_s"]).all()
    assert (frame["latency_s"] <= frame["latency_max_s"]).all()
    for name in ("p.parquet", "p.csv"):
        write_profile(frame, tmp_path / name)
        back = (pd.read_parquet if name.endswith("parquet") else pd.read_csv)(tmp_path / name)
        assert list(back.columns) == list(PROFILE_COLUMNS) and len(back) == 8


def test_profile_of_a_model_directory(tmp_path):
    from traces.zoo import ModelSize, make_model

    make_model(ModelSize(1, 16, 2, 32), 50, 16, 0).save_pretrained(tmp_path / "m")
    frame = profile_model(str(tmp_path / "m"), GRID, role="draft")
    assert set(frame["model"]) == {"m"} and set(frame["role"]) == {"draft"}
    assert len(frame) == 8


def test_unknown_shape_and_bad_grid_are_one_line_errors(tmp_path):
    with pytest.raises(SpecbatchError, match="expected a model directory or a shape name"):
        profile_model("no-such-model", GRID)
    with pytest.raises(SpecbatchError, match="batch sizes"):
        profile_model("vicuna-68m", ProfileGrid(batch_sizes=(0,)), layers=1)


def test_profile_cli_writes_the_file_and_prints_json(tmp_path, capsys):
    import json

    from analysis.cli import main

    out = tmp_path / "prof.csv"
    assert main(["profile", "--model", "vicuna-68m", "--layers", "1", "--out", str(out),
                 "--batch", "1", "--query", "1,2", "--kv", "8", "--repeats", "1",
                 "--warmup", "0", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["cells"] == 2 and out.is_file()
    with pytest.raises(SystemExit) as exc:
        main(["profile", "--model", "vicuna-68m", "--out", str(out), "--batch", "x"])
    assert exc.value.code == 2
