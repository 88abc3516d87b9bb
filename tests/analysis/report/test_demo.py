"""``specbatch demo``: the grid it promises, and a --quick smoke run end to end."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from specbatch.analysis.report.demo import demo_spec
from specbatch.analysis.sweep.spec import expand, parse_spec


def settings(data: dict) -> set[tuple]:
    runs = expand(parse_spec(data, "<demo>"))
    return {(r["policy"], r["num_speculative_tokens"], r["extra"], r["verify"]) for r in runs}


def test_full_demo_grid_is_the_tetris_paper_comparison():
    data = demo_spec("synth", depth=8, quick=False, seeds=None)
    base = data["base"]
    assert (base["requests"], base["max_num_seqs"], base["arrival"]) == (512, 64, "burst")
    assert (base["cost"], base["hardware"], base["target"], base["draft"]) == (
        "auto", "h100", "vicuna-33b", "vicuna-68m")  # auto: aic on this H100 pair
    grid = settings(data)
    both = ("token", "block")
    expected = {("ar", 3, 0, "token")}  # ar: SimConfig's default k, unused
    expected |= {("fixed", k, 0, v) for k in range(1, 7) for v in both}
    expected |= {("dsd", 3, 0, v) for v in both}  # dsd: the default k, unused (DSD plans k)
    expected |= {(p, k, e, v) for p in ("tetris", "oracle", "hindsight") for k in range(1, 7)
                 for e in (1, 2) for v in both}
    assert grid == expected


def test_demo_grid_respects_a_shallow_trace():
    grid = settings(demo_spec("synth", depth=4, quick=False, seeds=1))
    assert max(k + e for _, k, e, _ in grid) == 4
    assert ("tetris", 3, 1, "block") in grid and ("tetris", 3, 2, "block") not in grid
    assert ("dsd", 3, 0, "token") in grid


def test_demo_quick_runs_end_to_end(tmp_path):
    out = tmp_path / "demo"
    result = subprocess.run(
        [sys.executable, "-m", "specbatch", "demo", "--quick", "--out", str(out), "--json"],
        capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    payload = json.loads(result.stdout)
    policies = {row["policy"] for row in payload["headline"]}
    assert policies == {"ar", "fixed", "dsd", "tetris", "oracle", "hindsight"}
    assert payload["computed"] == payload["runs"] > 0
    for row in payload["headline"]:
        assert row["throughput"] > 0 and row["e2e_p99"] >= row["e2e_mean"] > 0
    assert Path(payload["report"]).exists()
    assert (out / "results.parquet").exists() and (out / "report" / "throughput_vs_k.png").exists()
