"""`specbatch tune`'s engine lines: every line it prints is accepted by the parser twin of its
engine (analysis.engines), the SGLang adaptive config is a file under --out named by path in
its flags, a draft-model tune prints no SGLang adaptive line, and a Hugging Face id works
offline as the target."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from specbatch.analysis.engines import sglang, trtllm, vllm
from specbatch.errors import SpecbatchError
from tests.cli.oneline import run_json

SMALL = ["--max-num-seqs", "4", "--k-max", "2", "--requests", "8", "--rates", "0.5",
         "--prompt-len", "fixed:16", "--output-len", "fixed:16", "--workers", "1"]


def _flag(line: str, name: str) -> str:
    words = shlex.split(line)
    return words[words.index(name) + 1]


def check_every_line(report: dict, draft: str) -> None:
    for engine, v in report["engines_verdict"].items():
        for line in {v["advice"], v["setting"]} - {None}:
            if line.startswith("no speculative decoding"):
                continue
            if engine == "vllm":
                vllm.check_speculative_config(_flag(line, "--speculative-config"))
            elif engine == "tensorrt-llm":
                trtllm.check_speculative_config(line.removeprefix("speculative_config: "),
                                                semantics="upper", max_batch_size=4)
            elif "--speculative-adaptive-config" in line:
                path = _flag(line, "--speculative-adaptive-config")
                sglang.load_adaptive_config(path, draft=draft)
        assert v["version"]  # the engine code it was checked against is named


def test_a_draft_model_tune_prints_no_sglang_adaptive_line(tmp_path, capsys):
    code, report = run_json(capsys, ["tune", "--out", str(tmp_path / "t"), "--acceptance",
                                     "0.7", *SMALL])
    assert code == 0
    check_every_line(report, "vicuna-68m")
    sg = report["engines_verdict"]["sglang"]
    assert sg["setting"] is None and "EAGLE" in sg["reason"]
    assert "--speculative-adaptive" not in (tmp_path / "t" / "settings.txt").read_text()
    assert not (tmp_path / "t" / "sglang_adaptive.json").exists()
    vl = json.loads(_flag(report["engines_verdict"]["vllm"]["advice"], "--speculative-config"))
    assert vl["method"] == "draft_model" and vl["model"] == "JackFram/llama-68m"


def test_an_eagle3_tune_writes_the_sglang_file_its_flags_name(tmp_path, capsys):
    out = tmp_path / "e"
    code, report = run_json(capsys, ["tune", "--out", str(out), "--target",
                                     "meta-llama/Llama-3.1-8B-Instruct", "--draft", "eagle3",
                                     "--acceptance", "0.7", *SMALL])
    assert code == 0
    check_every_line(report, "eagle3")
    sg = report["engines_verdict"]["sglang"]
    path = Path(_flag(sg["setting"], "--speculative-adaptive-config"))
    assert path == out.resolve() / "sglang_adaptive.json" and path.is_file()
    slots = sglang.load_adaptive_config(path, draft="eagle3")
    assert all(len(s["candidate_steps"]) == 2 for s in slots.values())
    vl = json.loads(_flag(report["engines_verdict"]["vllm"]["setting"], "--speculative-config"))
    assert vl["method"] == "eagle3" and vl["model"] == "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"
    trt = report["engines_verdict"]["tensorrt-llm"]
    assert json.loads(trt["setting"].removeprefix("speculative_config: "))[
        "decoding_type"] == "Eagle3"
    assert 0 not in json.loads(trt["setting"].removeprefix("speculative_config: ")).get(
        "draft_len_schedule", {}).values()  # #16888


def test_the_unmerged_context_table_only_when_asked_and_marked(tmp_path, capsys):
    base = ["tune", "--acceptance", "0.7", "--max-num-seqs", "2", "--k-max", "1",
            "--requests", "8", "--rates", "0.5", "--prompt-len", "fixed:16", "--output-len",
            "fixed:16", "--workers", "1"]
    code, plain = run_json(capsys, [*base, "--out", str(tmp_path / "a")])
    assert code == 0 and "vllm_proposal" not in plain
    code, report = run_json(capsys, [*base, "--out", str(tmp_path / "b"),
                                     "--vllm-context-buckets", "32"])
    proposal = report["vllm_proposal"]
    assert code == 0 and proposal["status"].startswith("NOT MERGED")
    config = json.loads(_flag(proposal["setting"], "--speculative-config"))
    table = config.pop("num_speculative_tokens_per_batch_size")
    assert vllm.check_proposal_table(table)[0][:4] == (1, 1, 1, 32)
    assert proposal["context_ranges"] == [[1, 32], [33, 2**31 - 1]]
    vllm.check_speculative_config(config)
    # the merged field refuses it
    with pytest.raises(SpecbatchError, match="3-item"):
        vllm.check_speculative_config({**config, "num_speculative_tokens_per_batch_size": table})
