"""Latency profiles (traces/capture/profile.py): the grid is measured, the columns are
docs/DESIGN.md's profile, named shapes and model dirs both work, and bad input is a one-line
error."""

from __future__ import annotations

import pandas as pd
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from specbatch.errors import SpecbatchError  # noqa: E402
from specbatch.traces.capture.profile import (  # noqa: E402
    PROFILE_COLUMNS,
    ProfileGrid,
    profile_model,
    write_profile,
)

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
    from specbatch.traces.models.zoo import ModelSize, make_model

    make_model(ModelSize(1, 16, 2, 32), 50, 16, 0).save_pretrained(tmp_path / "m")
    frame = profile_model(str(tmp_path / "m"), GRID, role="draft")
    assert set(frame["model"]) == {"m"} and set(frame["role"]) == {"draft"}
    assert len(frame) == 8


def test_unknown_shape_and_bad_grid_are_one_line_errors(tmp_path):
    with pytest.raises(SpecbatchError, match="expected a model directory or a shape name"):
        profile_model("no-such-model", GRID)
    with pytest.raises(SpecbatchError, match="batch sizes"):
        profile_model("vicuna-68m", ProfileGrid(batch_sizes=(0,)), layers=1)
    with pytest.raises(SpecbatchError, match="mixture-of-experts"):  # never a dense stand-in
        profile_model("qwen3-30b-a3b", GRID, layers=1)


def test_profile_cli_writes_the_file_and_prints_json(tmp_path, capsys):
    import json

    from specbatch.cli import main

    out = tmp_path / "prof.csv"
    assert main(["profile", "--model", "vicuna-68m", "--layers", "1", "--out", str(out),
                 "--batch", "1", "--query", "1,2", "--kv", "8", "--repeats", "1",
                 "--warmup", "0", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["cells"] == 2 and out.is_file()
    with pytest.raises(SystemExit) as exc:
        main(["profile", "--model", "vicuna-68m", "--out", str(out), "--batch", "x"])
    assert exc.value.code == 2


def test_max_cell_tokens_skips_exactly_the_cells_over_the_cap(tmp_path):
    """batch x (kv + query) <= 20 keeps (1,1,0) 1, (1,3,0) 3, (2,1,0) 2, (2,3,0) 6,
    (1,1,16) 17, (1,3,16) 19 and skips (2,1,16) 34, (2,3,16) 38."""
    from specbatch.traces.capture.profile import grid_cells

    grid = ProfileGrid(batch_sizes=(1, 2), query_tokens=(1, 3), kv_tokens=(0, 16), warmup=0,
                       repeats=1, max_cell_tokens=20)
    keep, skipped = grid_cells(grid)
    assert skipped == [(2, 1, 16), (2, 3, 16)] and len(keep) == 6
    frame = profile_model("vicuna-68m", grid, layers=1)
    assert set(zip(frame.batch_size, frame.query_tokens, frame.kv_tokens)) == set(keep)
    assert frame.attrs["skipped_cells"] == [[2, 1, 16], [2, 3, 16]]
    write_profile(frame, tmp_path / "p.parquet")
    assert pd.read_parquet(tmp_path / "p.parquet").attrs["skipped_cells"] == [[2, 1, 16],
                                                                              [2, 3, 16]]
    assert grid_cells(ProfileGrid(batch_sizes=(1, 2), max_cell_tokens=None))[1] == []


def test_max_cell_tokens_cli_reports_the_skipped_count_and_rejects_bad_caps(tmp_path, capsys):
    import json

    from specbatch.cli import main

    out = tmp_path / "prof.csv"
    base = ["profile", "--model", "vicuna-68m", "--layers", "1", "--out", str(out), "--batch",
            "1,4", "--query", "1", "--kv", "8", "--repeats", "1", "--warmup", "0"]
    assert main([*base, "--max-cell-tokens", "9", "--json"]) == 0
    captured = capsys.readouterr()
    summary = json.loads(captured.out)
    assert summary["cells"] == 1 and summary["cells_skipped"] == 1
    assert summary["max_cell_tokens"] == 9
    assert "skipped 1 of 2 cells" in captured.err
    for cap, message in (("0", "expected a positive integer"), ("8", "expected at least one")):
        assert main([*base, "--max-cell-tokens", cap]) == 2
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1
    with pytest.raises(SystemExit) as exc:
        main([*base, "--max-cell-tokens", "many"])
    assert exc.value.code == 2


def test_each_timed_pass_sees_exactly_kv_cached_entries(monkeypatch):
    """The random KV is built once per cell and every pass starts from ``kv`` entries."""
    import specbatch.traces.capture.profile as prof
    from specbatch.traces.capture.cache_api import cache_argument
    from specbatch.traces.capture.profile import load_profile_model, time_forward

    model, _ = load_profile_model("vicuna-68m", layers=1)
    built, seen = [], []
    real_kv = prof._random_kv
    monkeypatch.setattr(prof, "_random_kv", lambda *a: built.append(a) or real_kv(*a))
    forward, name = model.forward, cache_argument(model)  # read before forward is replaced

    def spy(*args, **kwargs):
        seen.append(kwargs[name].get_seq_length())
        return forward(*args, **kwargs)

    monkeypatch.setattr(model, "forward", spy)
    assert len(time_forward(model, 2, 3, 16, warmup=1, repeats=3)) == 3
    assert len(built) == 1 and seen == [16, 16, 16, 16]
