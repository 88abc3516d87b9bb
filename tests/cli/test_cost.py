"""Specification of ``specbatch cost fit`` and ``specbatch cost show``."""

from __future__ import annotations

import json

import pytest

from specbatch.cli import main
from tests.simulator.cost.test_registry import synthetic_profile


def run(capsys, *argv):
    """``specbatch *argv``; ``cost show`` without ``--cost`` prices with the roofline, whose
    numbers these tests pin (the default, ``auto``, has its own test below)."""
    argv = list(argv)
    if argv[:2] == ["cost", "show"] and "--cost" not in argv:
        argv += ["--cost", "roofline"]
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse refuses a malformed flag value
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def test_fit_reports_cross_validated_mape_as_json(tmp_path, capsys):
    path = tmp_path / "profile.parquet"
    synthetic_profile().to_parquet(path)
    code, out, _ = run(capsys, "cost", "fit", str(path), "--json")
    assert code == 0
    obj = json.loads(out)
    assert set(obj["roles"]) == {"draft", "target"}
    for role in ("draft", "target"):
        assert 0 <= obj["cv_mape"][role] < 0.03
        assert obj["roles"][role]["rows"] == 120
        assert all(v >= 0 for v in obj["roles"][role]["coefficients"].values())


def test_fit_prints_a_readable_summary(tmp_path, capsys):
    path = tmp_path / "profile.csv"
    synthetic_profile().to_csv(path, index=False)
    code, out, _ = run(capsys, "cost", "fit", str(path), "--folds", "3")
    assert code == 0
    assert "target vicuna-33b: 120 rows, 3-fold CV MAPE" in out
    assert "draft" in out and "const" in out


def test_fit_of_a_bad_profile_is_a_one_line_error(tmp_path, capsys):
    path = tmp_path / "bad.csv"
    synthetic_profile().drop(columns=["latency_s"]).to_csv(path, index=False)
    code, out, err = run(capsys, "cost", "fit", str(path))
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "bad.csv" in err and "column latency_s" in err


def test_show_prints_the_roofline_across_batches(capsys):
    code, out, _ = run(capsys, "cost", "show", "--hardware", "h100", "--target", "vicuna-33b",
                       "--draft", "vicuna-68m")
    assert code == 0
    assert "memory" in out and "prefill" in out and "KV capacity" in out
    assert len([line for line in out.splitlines() if line.strip()[:1].isdigit()]) == 6


def test_show_of_a_windowed_model_says_its_capacity_is_one_groups_and_what_vllm_logs(capsys):
    """Under the hybrid KV manager the capacity counts tokens of one KV cache group; vLLM's
    log divides the pool by the groups (num_blocks // groups · 16). A model without sliding
    layers keeps the plain line and no group keys."""
    code, out, _ = run(capsys, "cost", "show", "--hardware", "h100", "--target", "gemma-3-270m",
                       "--draft", "vicuna-68m", "--batch", "1", "--json")
    assert code == 0
    obj = json.loads(out)
    groups, logged = obj["kv_groups"], obj["vllm_kv_tokens"]
    assert groups > 1 and logged == obj["kv_capacity_tokens"] // 16 // groups * 16
    code, out, _ = run(capsys, "cost", "show", "--hardware", "h100", "--target", "vicuna-33b",
                       "--batch", "1", "--json")
    assert code == 0 and "kv_groups" not in json.loads(out)


def test_show_json_is_monotone_in_batch(capsys):
    code, out, _ = run(capsys, "cost", "show", "--batch", "1", "64", "512", "--kv", "512",
                       "--json")
    assert code == 0
    obj = json.loads(out)
    rows = obj["rows"]
    assert [r["batch"] for r in rows] == [1, 64, 512]
    for key in ("draft_s", "target_decode_s", "target_verify_s"):
        assert rows[0][key] <= rows[1][key] < rows[2][key]
    # a small draft's pass is the proposer loop's host floor until its GPU time passes it
    # (simulator.cost.features.host): 27 ops x 1.07 ms / 41 for the 2-layer vicuna-68m
    assert rows[0]["draft_s"] == rows[1]["draft_s"] == pytest.approx(27 * 1.07e-3 / 41)
    assert obj["sources"]["host"]["draft_pass"]["ops"] == 27
    assert 0.018 < rows[0]["target_decode_s"] < 0.030
    # vLLM's default async scheduling for a draft model hides a under the pass
    assert obj["overhead_s"] == 0 and obj["prefill_s"] > rows[0]["target_decode_s"]
    assert obj["async_scheduling"].startswith("auto -> on (vLLM default for a draft model")


@pytest.mark.parametrize("flag, draft, k, on", [
    ((), "vicuna-68m", "3", True),  # auto: vLLM's default
    ((), "ngram", "3", False),  # auto: off for the CPU n-gram proposer
    ((), "ngram", "0", True),  # no speculative config
    (("--async-scheduling",), "vicuna-68m", "3", True),  # the flag alone: true
    (("--async-scheduling",), "ngram", "3", False),  # true, dropped for n-gram
    (("--async-scheduling", "false"), "vicuna-68m", "3", False),
    (("--async-scheduling", "auto"), "eagle3", "3", True),
])
def test_show_resolves_async_scheduling_as_simulate_does(capsys, flag, draft, k, on):
    """cost show's host terms follow the same rule as a simulated run's
    (async_overhead.resolve_async): a + b n hidden under the pass when on (overhead 0), a per
    step when off; the JSON and the header line say how it resolved."""
    from specbatch.simulator.cost.features.host import STEP_S

    argv = ["cost", "show", "--draft", draft, "--k", k, "--batch", "8", *flag]
    code, out, _ = run(capsys, *argv, "--json")
    assert code == 0
    obj = json.loads(out)
    assert obj["overhead_s"] == (0.0 if on else STEP_S)
    assert obj["async_scheduling"].split(" (")[0].endswith("on" if on else "off")
    code, out, _ = run(capsys, *argv)
    assert f"async scheduling {obj['async_scheduling']}" in out.splitlines()[0]


def test_show_fixed_host_overlaps_the_presets_overhead_under_async_scheduling(capsys):
    code, out, _ = run(capsys, "cost", "show", "--host", "fixed", "--batch", "1", "--json")
    on = json.loads(out)
    code2, out, _ = run(capsys, "cost", "show", "--host", "fixed", "--batch", "1", "--json",
                        "--async-scheduling", "false")
    off = json.loads(out)
    assert code == code2 == 0
    assert on["overhead_s"] == 0.0 and off["overhead_s"] == 1e-3  # the preset's 1 ms
    assert on["sources"]["host"]["combine"].startswith("max(target pass, overhead)")


def test_show_refuses_a_bad_async_scheduling_in_one_line(capsys):
    code, out, err = run(capsys, "cost", "show", "--async-scheduling", "maybe")
    assert code == 2 and out == ""
    assert "--async-scheduling: expected auto, true or false, got 'maybe'" in err
    assert len(err.strip().splitlines()) == 1


def test_show_with_a_profiled_model(tmp_path, capsys):
    path = tmp_path / "profile.csv"
    synthetic_profile().to_csv(path, index=False)
    code, out, _ = run(capsys, "cost", "show", "--cost", "profiled", "--profile", str(path),
                       "--batch", "8", "--json")
    assert code == 0
    assert json.loads(out)["rows"][0]["target_verify_s"] > 0


@pytest.mark.parametrize("argv, match", [
    (["cost", "show", "--hardware", "tpu"], "hardware 'tpu'"),
    (["cost", "show", "--kv", "-1"], "--kv: expected an integer >= 0, got -1"),
    (["cost", "show", "--kv", str(10**21)], "at most 2^63 - 1"),
    (["cost", "show", "--k", "100000"], "SPECBATCH_ALLOW_LARGE=1"),
    (["cost", "show", "--target", "vicuna-33b", "--tp", "8"], "52 attention heads"),
    (["cost", "show", "--cost", "profiled"], "profile"),
    (["cost", "fit", "missing.csv"], "no such file"),
])
def test_bad_arguments_exit_2_with_one_line(capsys, argv, match):
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert match in err and err.count("\n") == 1


def test_help_has_examples(capsys):
    for argv in (["cost", "--help"], ["cost", "fit", "--help"], ["cost", "show", "--help"]):
        with pytest.raises(SystemExit) as info:
            main(argv)
        assert info.value.code == 0
        assert "example:" in capsys.readouterr().out


@pytest.mark.parametrize("execution, low, high", [("cuda_graph", 0.05e-3, 0.5e-3),
                                                  ("eager", 1.5e-3, 3e-3)])
def test_show_json_splits_the_step_and_names_the_preset_source(capsys, execution, low, high):
    code, out, _ = run(capsys, "cost", "show", "--target", "vicuna-33b", "--draft", "vicuna-68m",
                       "--hardware", "h100", "--execution", execution, "--host", "fixed",
                       "--json")  # the preset's passes alone (no proposer-loop floor)
    assert code == 0
    obj = json.loads(out)
    assert obj["execution"]["name"] == execution and obj["execution"]["source"]
    for s in obj["step_split"]:
        assert low < s["draft_pass_s"] < high and s["draft_passes"] == obj["k"] == 3
        assert s["step_s"] == pytest.approx(s["draft_s"] + s["target_verify_s"]
                                            + s["sampler_s"] + s["overhead_s"])
        assert 0 < s["draft_share"] < 1


def test_show_prints_the_split_and_source(capsys):
    code, out, _ = run(capsys, "cost", "show", "--execution", "eager", "--batch", "1",
                       "--host", "fixed")
    assert code == 0
    assert (
        "draft %" in out
        and "batch    1: 2.140 x 3" in out
        and "source:" in out
        and "h100-*.parquet" in out
    )


def test_fit_warns_when_held_out_mape_exceeds_ten_percent(capsys):
    # the measured SmolLM2 profile: 5-fold held-out MAPE 13.6 % (benchmarks/gpu/README.md)
    code, out, err = run(capsys, "cost", "fit", "traces/data/profiles/h100-smollm2-135m.parquet",
                         "--json")
    assert code == 0
    obj = json.loads(out)
    assert obj["cv_mape"]["target"] > 0.10
    assert len(obj["warnings"]) == 1 and "held-out MAPE" in obj["warnings"][0]
    assert err.startswith("warning: target smollm2-135m") and err.count("\n") == 1


def test_a_good_fit_has_no_warning(tmp_path, capsys):
    path = tmp_path / "profile.csv"
    synthetic_profile().to_csv(path, index=False)
    code, out, err = run(capsys, "cost", "fit", str(path), "--json")
    assert code == 0 and json.loads(out)["warnings"] == [] and err == ""
    code, out, err = run(capsys, "cost", "show", "--cost", "profiled", "--profile", str(path),
                         "--batch", "8", "--json")
    obj = json.loads(out)
    assert code == 0 and obj["warnings"] == [] and err == "" and obj["execution"] is None
    assert set(obj["cv_mape"]) == {"draft", "target"}


def test_cost_show_warns_when_the_weights_do_not_fit(capsys):
    code, out, err = run(capsys, "cost", "show", "--target", "llama-3.1-70b", "--draft",
                         "llama-3.2-1b", "--json")
    assert code == 0
    warnings = json.loads(out)["warnings"]
    assert len(warnings) == 1 and "weights do not fit (set tp >= 2" in warnings[0]
    assert err.count("warning: ") == 1
    code, out, err = run(capsys, "cost", "show", "--target", "llama-3.1-70b", "--draft",
                         "llama-3.2-1b", "--tp", "2", "--json")
    assert "warnings" not in json.loads(out) and err == ""


def test_show_prices_the_rejection_sampler_in_the_step(capsys):
    """The fused sampler adds bytes over bandwidth + 50 µs; the measured torch BV path
    2 ms per draft position; none nothing (simulator.cost.verify_cost)."""
    split = {}
    for sampler in ("none", "fused", "torch"):
        code, out, _ = run(capsys, "cost", "show", "--batch", "64", "--verify", "block",
                           "--verify-cost", sampler, "--json")
        assert code == 0
        obj = json.loads(out)
        assert obj["verify"] == "block" and obj["verify_cost"] == sampler
        split[sampler] = obj["step_split"][0]
    assert split["none"]["sampler_s"] == 0.0 == split["none"]["sampler_share"]
    assert 50e-6 < split["fused"]["sampler_s"] < 0.2e-3
    assert split["torch"]["sampler_s"] == pytest.approx(3 * 1.96e-3, abs=0.2e-3)
    assert split["torch"]["step_s"] - split["none"]["step_s"] == pytest.approx(
        split["torch"]["sampler_s"])
    code, out, _ = run(capsys, "cost", "show", "--batch", "8")
    assert "sampler (token, fused)" in out and "sampler fused: assumed" in out


def test_show_prices_a_quantised_draft_and_its_kv_capacity(capsys):
    argv = ["cost", "show", "--cost", "roofline", "--target", "llama-3.1-8b", "--draft",
            "llama-3.2-1b", "--batch", "1", "--json",
            "--host", "fixed"]  # GPU passes (vLLM's loop floor hides the saving)
    assert main(argv) == 0
    full = json.loads(capsys.readouterr().out)
    assert main([*argv, "--draft-weight-bits", "4"]) == 0
    q4 = json.loads(capsys.readouterr().out)
    assert full["draft_weight_bits"] == 16 and q4["draft_weight_bits"] == 4
    assert q4["rows"][0]["draft_s"] < full["rows"][0]["draft_s"]
    assert q4["rows"][0]["target_decode_s"] == full["rows"][0]["target_decode_s"]
    assert q4["kv_capacity_tokens"] > full["kv_capacity_tokens"]


@pytest.mark.parametrize("argv", [["--draft-weight-bits", "1"],
                                  ["--draft", "ngram", "--draft-weight-bits", "4"]])
def test_show_refuses_draft_weight_bits_it_cannot_price(argv, capsys):
    code, _, err = run(capsys, "cost", "show", *argv)
    assert code == 2 and err.count("\n") == 1
    assert "draft-weight-bits" in err or "draft_weight_bits" in err


FP8_CONFIG = {"hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
              "num_key_value_heads": 8, "num_hidden_layers": 32, "vocab_size": 128256,
              "torch_dtype": "bfloat16",
              "quantization_config": {"quant_method": "fp8", "activation_scheme": "dynamic"}}


def test_show_prices_a_fp8_checkpoint_and_fp8_kv(tmp_path, capsys):
    (tmp_path / "config.json").write_text(json.dumps(FP8_CONFIG))
    argv = ["cost", "show", "--cost", "roofline", "--draft", "llama-3.2-1b", "--batch", "1",
            "--json"]
    assert main([*argv, "--target", "llama-3.1-8b"]) == 0
    bf16 = json.loads(capsys.readouterr().out)
    # the checkpoint's own method (quantization none = vLLM's None) and the knob naming it
    for extra in ([], ["--quantization", "fp8"]):
        assert main([*argv, "--target", str(tmp_path), "--kv-cache-dtype", "fp8", *extra]) == 0
        fp8 = json.loads(capsys.readouterr().out)
        assert (fp8["quantization"], fp8["kv_cache_dtype"]) == ("fp8", "fp8")
        assert fp8["rows"][0]["target_decode_s"] < 0.6 * bf16["rows"][0]["target_decode_s"]
        assert fp8["kv_capacity_tokens"] > 2 * bf16["kv_capacity_tokens"]


@pytest.mark.parametrize(("argv", "needle"), [
    (["--quantization", "awq"], "quantization 'awq': expected 'fp8' or none"),
    (["--quantization", "int8"], "--quantization"),
    (["--kv-cache-dtype", "int8"], "--kv-cache-dtype"),
])
def test_show_refuses_a_quantization_contradicting_the_checkpoint(tmp_path, capsys, argv, needle):
    (tmp_path / "config.json").write_text(json.dumps(FP8_CONFIG))
    code, _, err = run(capsys, "cost", "show", "--target", str(tmp_path), *argv)
    assert code == 2 and err.count("\n") == 1 and needle in err


MISTRAL_CONFIG = {"architectures": ["MistralForCausalLM"], "model_type": "mistral",
                  "hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
                  "num_key_value_heads": 8, "num_hidden_layers": 32, "sliding_window": 4096,
                  "vocab_size": 32000, "tie_word_embeddings": False}


@pytest.mark.parametrize("target", ["mistral-7b-v0.1", "config.json"])
def test_a_sliding_window_target_with_the_default_draft_is_priced_with_a_note(tmp_path, target):
    """Issue 46: Mistral-7B-v0.1's sliding layers (64 KiB pages at 16 tokens) and
    Vicuna-68M's (48 KiB) cannot be unified by vLLM's hybrid KV cache manager; cost show
    prices the KV as vLLM must run them, with disable_hybrid_kv_cache_manager, and says so."""
    from tests.cli.oneline import run_cli

    if target == "config.json":
        (tmp_path / "config.json").write_text(json.dumps(MISTRAL_CONFIG))
        target = str(tmp_path / "config.json")
    out = run_cli(["cost", "show", "--target", target, "--batch", "1", "--json"], tmp_path)
    assert out.returncode == 0, out.stderr
    obj = json.loads(out.stdout)  # one JSON object
    assert obj["disable_hybrid_kv_cache_manager"] is True
    assert "cannot be unified" in obj["notes"][0]
    flagged = run_cli(["cost", "show", "--target", target, "--batch", "1", "--json",
                       "--disable-hybrid-kv-cache-manager"], tmp_path)
    again = json.loads(flagged.stdout)
    assert again["kv_capacity_tokens"] == obj["kv_capacity_tokens"] and "notes" not in again
    text = run_cli(["cost", "show", "--target", target, "--batch", "1"], tmp_path)
    assert text.returncode == 0 and "\nnote: KV capacity priced with " \
        "disable_hybrid_kv_cache_manager" in text.stdout


def test_a_window_whose_pages_unify_keeps_the_hybrid_manager(capsys):
    code, out, _ = run(capsys, "cost", "show", "--target", "gemma-3-270m", "--batch", "1",
                       "--json")
    obj = json.loads(out)
    assert code == 0 and obj["disable_hybrid_kv_cache_manager"] is False
    assert obj["kv_groups"] > 1 and "notes" not in obj


def test_show_defaults_to_auto_and_names_its_choice(capsys):
    """The default cost is ``auto``: on an H100 with a Llama-shaped pair it picks AIConfigurator's
    measured tables and says so; where no measured data covers the GPU, the roofline, named."""
    code, out, _ = run(capsys, "cost", "show", "--cost", "auto", "--json")
    assert code == 0
    assert json.loads(out)["cost"] == "auto"
    assert main(["cost", "show", "--json"]) == 0  # no --cost: the default
    default = json.loads(capsys.readouterr().out)
    assert default == json.loads(out)
