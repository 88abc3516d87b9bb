"""``specbatch validate --vllm``: one bundled run end to end, the ``--json`` contract, and the
refusals (one-line errors)."""

from __future__ import annotations

import json

import pytest

from tests.cli.oneline import assert_one_line_error, run_cli, run_main

HEADLINE = {"ttft_mean", "ttft_p99", "tpot_mean", "tpot_p99", "e2e_mean", "e2e_p99",
            "throughput"}


def test_one_bundled_run_json_stdout_is_one_object_and_out_keeps_it(tmp_path):
    out = tmp_path / "res"
    proc = run_cli(["validate", "--vllm", "rtxpro6000-llama-3.1-8b", "--json", "--out",
                    str(out)], tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(proc.stdout)  # the whole of stdout is one JSON object
    assert set(report["metrics"]) == HEADLINE
    for row in report["metrics"].values():
        assert row["error"] == pytest.approx(row["simulated"] / row["measured"] - 1)
    assert report["metrics"]["ttft_mean"]["measured"] == pytest.approx(7.0972, abs=1e-4)
    assert report["hardware"] == "rtxpro6000" and report["cost"] == "roofline"
    assert set(report["tests"]) == {"ttft", "tpot", "e2e"}
    assert json.loads((out / "validate_vllm.json").read_text())["metrics"] == report["metrics"]
    assert (out / "requests.parquet").is_file()
    # the run's stamps are the engine core's (queued_ts to first/last_token_ts, in process):
    # no client side, so the replay adds none and says so among the mapped settings
    mapped = {row[0]: row for row in report["settings"]["mapped"]}
    row = mapped["client side of TTFT and e2e (not in the stamps)"]
    assert row[1] == 0.0 and "client_ttft_s = 0" in row[2]
    assert "client_ttft_s = 0.0" in (out / "config.toml").read_text()


@pytest.mark.slow
@pytest.mark.parametrize("run", ["rtx4090-llama-3.1-8b", "rtxpro6000-qwen3-32b"])
def test_the_calibrated_replay_meets_the_dense_goal(capsys, run):
    # docs/fidelity.md: under the calibrated cost (per-layer profiles; never fitted on the
    # run), the LM head at the rows vLLM samples, within 5 % on TTFT and 3 % on TPOT / e2e.
    # The RTX PRO 6000 Llama-3.1-8B run misses it on TTFT (-6.0 %) since the head stopped
    # over-pricing its prefill steps (docs/fidelity.md, the LM-head bullet): not asserted.
    code, text, _ = run_main(capsys, ["validate", "--vllm", run, "--cost", "calibrated",
                                      "--json"])
    report = json.loads(text)
    assert code == 0 and report["cost"] == "calibrated"
    assert report["cost_source"].startswith("calibrated: LLMServingSim's per-layer")
    m = report["metrics"]
    assert abs(m["ttft_mean"]["error"]) < 0.05
    assert abs(m["tpot_mean"]["error"]) < 0.03 and abs(m["e2e_mean"]["error"]) < 0.03
    mapped = {row[0] for row in report["settings"]["mapped"]}
    if run.startswith("rtxpro6000"):  # records engine_kwargs only (the RTX 4090 run: all)
        assert "async_scheduling (not recorded: vLLM default)" in mapped  # on in vLLM 0.19


def test_the_figure_is_a_png(tmp_path):
    from specbatch.analysis.validate.vllm_run import latency_figure
    from tests.analysis.validate.test_vllm_metrics import THREE

    path = latency_figure("three", THREE, THREE.assign(finish=THREE["finish"] + 1),
                          tmp_path / "fig.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_list_names_the_bundled_runs(capsys):
    code, text, _ = run_main(capsys, ["validate", "--vllm", "list", "--json"])
    runs = json.loads(text)["runs"]
    assert code == 0 and runs["rtxpro6000-qwen3-30b-a3b"]["kind"] == "moe"
    assert runs["rtx4090-llama-3.1-8b"]["gpu"] == "rtx4090"


@pytest.mark.parametrize("argv, needle", [
    (["--vllm", "rtxpro6000-llama-3.1-8b", "--hardware", "tpu"], "hardware"),
    (["--vllm", "rtxpro6000-llama-3.1-8b", "--fit", "x"], "--fit: expected no live-run flag"),
    (["--vllm", "no-such-run"], "expected a run folder"),
    (["--vllm", "rtxpro6000-llama-3.1-8b", "--cost", "magic"], "field cost"),
    (["--vllm", "rtxpro6000-llama-3.1-8b", "--figure", "x.svg"], "ending in .png"),
])
def test_refusals_are_one_line_errors(capsys, argv, needle):
    code, _, err = run_main(capsys, ["validate", *argv])
    assert_one_line_error(code, err, needle)


def test_a_folder_without_a_device_name_asks_for_hardware(tmp_path, capsys):
    from tests.traces.public.test_vllm_runs import write_run

    folder = write_run(tmp_path / "run")
    code, _, err = run_main(capsys, ["validate", "--vllm", str(folder)])
    assert_one_line_error(code, err, "field hardware.device_name: expected the GPU's name")


def test_a_hand_made_folder_replays_with_hardware_and_model_given(tmp_path, capsys):
    from tests.traces.public.test_vllm_runs import write_run

    folder = write_run(tmp_path / "run")
    code, text, err = run_main(capsys, ["validate", "--vllm", str(folder), "--hardware", "h100",
                                        "--model", "llama-3.1-8b", "--json"])
    assert code == 0, err
    report = json.loads(text)
    assert report["requests"] == 3 and report["hardware_from"] == "--hardware"
    assert report["metrics"]["ttft_mean"]["measured"] == pytest.approx((0.5 + 0.5 + 2.0) / 3)
    assert "assumed efficiencies" in report["cost_source"]
    defaults = [row[0] for row in report["settings"]["mapped"] if "not recorded" in row[0]]
    assert any(d.startswith("block_size") for d in defaults)
