"""Specification of ``cost show --cost calibrated``, the per-pass ``breakdown`` of every
``cost show`` row, ``cost import-vidur`` and the cost sources ``simulate`` names."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from specbatch.simulator.cost.report import SHOWN_PARTS
from tests.cli.oneline import run_json, run_main

SLICE = Path(__file__).parents[1] / "traces" / "data" / "vidur_slice"


#: (cost, flags, MoE): dense, mixture of experts (uniform and skewed routing, W8A8 FP8,
#: expert parallel is simulate's), sliding windows, a head drafter, a host-side drafter.
SPLIT_CASES = [
    ("roofline", ["--target", "vicuna-33b", "--tp", "4"], False),
    ("calibrated", ["--target", "vicuna-33b", "--tp", "4"], False),
    ("roofline", ["--target", "qwen3-30b-a3b"], True),
    ("calibrated", ["--target", "qwen3-30b-a3b"], True),
    ("roofline", ["--target", "qwen3-30b-a3b", "--routing-skew", "1.2"], True),
    ("roofline", ["--target", "qwen3-30b-a3b", "--quantization", "fp8"], True),
    ("roofline", ["--target", "mixtral-8x7b", "--tp", "2"], True),
    ("roofline", ["--target", "deepseek-v2-lite"], True),
    ("roofline", ["--target", "gemma-3-270m"], False),
    ("calibrated", ["--target", "gemma-3-270m"], False),
    ("roofline", ["--target", "mistral-7b-v0.1"], False),
    ("roofline", ["--target", "llama-3.1-8b", "--draft", "eagle3"], False),
    ("roofline", ["--target", "qwen3-30b-a3b", "--draft", "ngram"], True),
]


@pytest.mark.parametrize("cost, flags, moe", SPLIT_CASES, ids=lambda v: str(v))
def test_every_row_splits_each_pass_into_parts_that_sum_to_it(capsys, cost, flags, moe):
    code, obj = run_json(capsys, ["cost", "show", "--cost", cost, *flags,
                                  "--batch", "1", "64", "256", "--k", "3"])
    assert code == 0
    for row in obj["rows"]:
        split = row["breakdown"]
        assert set(split) == {"target_decode", "target_verify", "draft"}
        for name, key in (("target_decode", "target_decode_s"),
                          ("target_verify", "target_verify_s"), ("draft", "draft_s")):
            if split[name] is None:  # a head's draft pass: its own pricing, no parts
                continue
            assert set(split[name]) == set(SHOWN_PARTS)  # the device's parts and the host's
            assert all(v >= 0 for v in split[name].values()), split[name]
            assert sum(split[name].values()) == pytest.approx(row[key], rel=1e-12)
        # the routed experts are a named part of a MoE target's passes, 0 for a dense one
        assert (split["target_decode"]["experts"] > 0) == moe
        assert (split["target_verify"]["experts"] > 0) == moe
        if "--tp" in flags:
            assert split["target_decode"]["allreduce"] > 0
    assert obj["sources"]["target"]["summary"]


def test_a_memory_bound_moe_decode_spends_the_touched_experts_bytes():
    """Qwen3-30B-A3B at batch 1 on an H100 is memory-bound, so the experts' part is the bytes
    of the k = 8 experts a token touches on each of the M = 48 MoE layers over the bandwidth:
    b M 3 h I_e k / (β η) (simulator.cost.analytic.roofline; the 1.35 ms issue 46 found missing)."""
    from specbatch.simulator.cost.registry import build_cost_model
    from specbatch.simulator.cost.report import roofline_split

    model = build_cost_model("roofline", "h100", "qwen3-30b-a3b", "vicuna-68m")
    shape, hw = model.target, model.hardware
    assert (shape.moe_layers, shape.top_k, shape.hidden, shape.expert_intermediate) == \
        (48, 8, 2048, 768)
    one = np.ones(1, dtype=np.int64)
    parts = roofline_split(model, "target", one, 512 * one)
    expected = 2 * 48 * 3 * 2048 * 768 * 8 / (hw.mem_bw * hw.memory_eff)
    assert parts["experts"] == pytest.approx(expected, rel=1e-12)
    assert sum(parts.values()) == pytest.approx(model.step_time("target", one, 512 * one),
                                                rel=1e-12)


def test_the_moe_source_line_keeps_the_laws_error_apart_from_what_is_not_validated(capsys):
    code, out, _ = run_main(capsys, ["cost", "show", "--cost", "calibrated", "--target",
                                     "qwen3-30b-a3b", "--batch", "1"])
    assert code == 0
    source = next(line for line in out.splitlines() if line.startswith("source: "))
    assert "(not validated) (validated" not in source
    assert ("calibrated roofline (h100 law) (validated MAPE 4.2 %, mean +0.6 %), MoE experts "
            "touched as one grouped GEMM (not validated); draft:") in source
    assert "layers + attention + experts + allreduce + lm_head + launch + host = pass" in out


def test_a_dense_models_text_split_leaves_the_zero_experts_out(capsys):
    code, out, _ = run_main(capsys, ["cost", "show", "--target", "vicuna-33b", "--batch", "1"])
    assert code == 0
    assert "layers + attention + allreduce + lm_head + launch + host = pass" in out


def test_calibrated_show_names_the_profile_cell_and_prints_the_split(capsys):
    code, out, _ = run_main(capsys, ["cost", "show", "--cost", "calibrated", "--target",
                                     "vicuna-7b", "--batch", "1", "32"])
    assert code == 0
    assert "vidur h100 meta-llama/Llama-2-7b-hf tp 1 (validated MAPE" in out
    assert "where the time goes at batch 32 (ms): layers + attention + allreduce" in out
    assert "target_verify (k+1=4)" in out


@pytest.mark.slow  # fitting the profiled model's families takes ~10 s
def test_profiled_rows_have_no_split(capsys, tmp_path):
    from tests.simulator.cost.test_registry import synthetic_profile

    path = tmp_path / "p.parquet"
    synthetic_profile().to_parquet(path)
    code, obj = run_json(capsys, ["cost", "show", "--cost", "profiled", "--profile", str(path),
                                  "--batch", "1"])
    assert code == 0
    assert obj["rows"][0]["breakdown"]["target_decode"] is None
    assert obj["sources"]["target"]["summary"].startswith("user latency profile")


def test_import_vidur_then_price_from_the_user_folder(capsys, tmp_path):
    out = tmp_path / "mine"
    code, obj = run_json(capsys, ["cost", "import-vidur", str(SLICE), "--out", str(out),
                                  "--repository", "my lab"])
    assert code == 0
    assert (obj["compute_rows"], obj["network_rows"], obj["gpus"]) == (9, 3, ["h100"])
    code, obj = run_json(capsys, ["cost", "show", "--cost", "calibrated", "--profile", str(out),
                                  "--target", "vicuna-7b", "--tp", "2", "--batch", "1"])
    assert code == 0
    layers = obj["sources"]["target"]["layers"]
    assert layers["source"] == "user profile cell"
    assert f"user profile {out}: h100 meta-llama/Llama-2-7b-hf tp 2" == layers["cell"]


def test_import_vidur_of_a_bad_folder_is_one_line(capsys, tmp_path):
    code, out, err = run_main(capsys, ["cost", "import-vidur", str(tmp_path), "--out",
                                       str(tmp_path / "o")])
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and "no compute/<gpu>" in err


def test_simulate_json_names_the_cost_source(capsys):
    code, obj = run_json(capsys, ["simulate", "--trace", "synth", "--requests", "4",
                                  "--cost", "calibrated", "--target", "vicuna-7b"])
    assert code == 0
    src = obj["cost_source"]
    assert src["target"]["summary"] == "vidur h100 meta-llama/Llama-2-7b-hf tp 1"
    assert src["draft"]["summary"].startswith("calibrated roofline")


@pytest.mark.slow  # a small plan: ~10-20 s
def test_plan_names_the_source_and_prices_a_user_profile_first(capsys, tmp_path):
    code, _ = run_json(capsys, ["cost", "import-vidur", str(SLICE), "--out", str(tmp_path / "p")])
    assert code == 0
    code, obj = run_json(capsys, [
        "plan", "--out", str(tmp_path / "plan"), "--target", "vicuna-7b", "--rate", "2",
        "--prompt-len", "fixed:50", "--output-len", "fixed:20", "--requests", "8", "--tp", "2",
        "--max-gpus", "2", "--policies", "ar", "--workers", "1", "--profile",
        str(tmp_path / "p")])
    assert code == 0
    src = obj["cost_source"]
    assert (src["cost"], src["hardware"], src["tp"]) == ("calibrated", "h100", 2)
    assert src["target"]["layers"]["source"] == "user profile cell"
    assert src["draft"]["summary"].startswith("calibrated roofline")


AIC_SLICE = Path(__file__).parents[1] / "traces" / "data" / "aic_slice"


def test_import_aiconfigurator_writes_laws_with_provenance(capsys, tmp_path):
    from specbatch.simulator.cost.measured.aic_import import load_laws

    out = tmp_path / "laws"
    code, obj = run_json(capsys, ["cost", "import-aiconfigurator", str(AIC_SLICE), "--out",
                                  str(out), "--commit", "abc"])
    assert code == 0 and obj["systems"]["gpu"]["vllm_version"] == "0.10.0"
    version, laws = load_laws(out)["gpu"]
    assert version == "0.10.0"
    gemm = next(law for law in laws if law.family == "gemm")
    assert gemm.mape_loso < 1e-6  # the slice is made from the law itself


def test_import_aiconfigurator_refuses_bad_input_in_one_line(capsys, tmp_path):
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "keep.txt").write_text("mine")
    code, out, err = run_main(capsys, ["cost", "import-aiconfigurator", str(AIC_SLICE),
                                       "--out", str(tmp_path / "other")])
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert (tmp_path / "other" / "keep.txt").read_text() == "mine"
    code, out, err = run_main(capsys, ["cost", "import-aiconfigurator", str(AIC_SLICE),
                                       "--system", "nope", "--out", str(tmp_path / "o")])
    assert code == 2 and "--system nope" in err and len(err.strip().splitlines()) == 1

