"""The bundled vLLM-run suite (benchmarks/fidelity_vllm.py, docs/fidelity.md)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from specbatch.analysis.validate.vllm_run import suite_row, suite_table
from specbatch.traces.public.vllm_runs import bundled_runs

DOCS = Path(__file__).resolve().parents[3] / "docs" / "fidelity.md"


def test_the_table_prints_errors_verdicts_and_refusals():
    anchor = {"ttft_mean": -0.04, "tpot_mean": -0.01, "e2e_mean": None}
    ok = {"run": "a", "cost": "roofline", "anchor": anchor, "tost": {"ttft": True,
          "tpot": False, "e2e": True}, "errors": {k: 0.012 for k in (
              "ttft_mean", "tpot_mean", "e2e_mean", "ttft_p99", "tpot_p99", "e2e_p99",
              "throughput")}}
    refused = {"run": "b", "cost": "roofline", "anchor": anchor, "refused": "MoE not priced"}
    lines = suite_table([ok, refused]).splitlines()
    assert lines[2] == ("| a | roofline | +1.2 % | +1.2 % | +1.2 % | +1.2 % | +1.2 % | +1.2 % "
                        "| +1.2 % | yes/no/yes | -4.0 % / -1.0 % / - |")
    assert lines[3].startswith("| b | roofline | refused: MoE not priced |")


@pytest.mark.slow
def test_the_whole_suite_reproduces_the_docs_table_and_repeats_bit_for_bit():
    rows = [suite_row(name, "roofline") for name in bundled_runs()]
    moe = [r for r in rows if r["kind"] == "moe"]
    # an MoE run is priced by the MoE law or refused as such, never given a dense number
    assert moe and all("errors" in r or r["refused"].startswith("MoE not priced") for r in moe)
    for r in rows:
        if "errors" in r:
            assert all(math.isfinite(v) for v in r["errors"].values())
    rows += [suite_row(name, "calibrated") for name in bundled_runs()]
    assert all("errors" in r for r in rows)  # the calibrated cost prices every bundled run
    table = suite_table(rows)
    page = DOCS.read_text()
    for line in table.splitlines()[2:]:
        assert line in page, line
    assert [suite_row(name, "roofline") for name in bundled_runs()] == rows[:len(rows) // 2]
