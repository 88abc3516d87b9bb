"""What users type works offline: a Hugging Face id as the target, a ShareGPT JSON and a vLLM
bench serve result as simulate's --workload, and the hardware presets listed in --help."""

from __future__ import annotations

import json

from tests.cli.oneline import run_json


def test_simulate_a_sharegpt_file_on_a_hugging_face_id(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    conv = [{"conversations": [{"from": "human", "value": "q " * (10 + i)},
                               {"from": "gpt", "value": "a " * (20 + 3 * i)}]} for i in range(12)]
    (tmp_path / "sharegpt.json").write_text(json.dumps(conv))
    code, summary = run_json(capsys, ["simulate", "--workload", "sharegpt.json", "--target",
                                      "meta-llama/Llama-3.1-8B-Instruct", "--draft",
                                      "meta-llama/Llama-3.2-1B-Instruct", "--requests", "12"])
    assert code == 0 and summary["requests"] == 12


def test_simulate_a_bench_serve_result_with_its_arrivals(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = {"request_rate": 2.0, "burstiness": 1.0, "input_lens": [64] * 10,
              "output_lens": [16] * 10}
    (tmp_path / "bench.json").write_text(json.dumps(result))
    code, summary = run_json(capsys, ["simulate", "--workload", "bench.json", "--arrival",
                                      "trace", "--requests", "10"])
    assert code == 0 and summary["requests"] == 10


def test_hardware_presets_are_listed_in_help(capsys):
    from specbatch.cli import main
    from specbatch.simulator.cost.gpus.hardware import HARDWARE

    for command in ("plan", "tune"):
        try:
            main([command, "--help"])
        except SystemExit:
            pass
        out = " ".join(capsys.readouterr().out.split())
        assert all(name in out for name in HARDWARE), command
