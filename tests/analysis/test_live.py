"""Live speculative decoding (analysis/live.py): the loop is exact (TV and BV at temperature 0
reproduce the target's own greedy decoding, whatever the policy and cache compaction), it
writes the simulator's tables, `specbatch validate` replays it end to end, and bad paths are
one-line errors with exit code 2."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from specbatch.analysis.live import LiveConfig, run_live, validate  # noqa: E402
from specbatch.simulator.engine import STEP_COLUMNS  # noqa: E402
from specbatch.simulator.metrics import REQUEST_COLUMNS  # noqa: E402

from specbatch.cli import main  # noqa: E402

TEXT = ("def add(a, b):\n    return a + b\n\nThe quick brown fox jumps over the lazy dog. "
        "class Point:\n    def __init__(self, x, y):\n        self.x = x\n") * 4
PROMPTS = ["def add(a, b):", "The quick brown fox", "class Point:\n",
           "jumps over the lazy dog and the", "return a"]
# token ids of different lengths (left padding is exercised)
IDS = [[5, 6, 7], [8, 9, 10, 11, 12, 13, 14], [20], [30, 31, 32, 33], [40, 41]]


def _save_pair(out: Path) -> tuple[str, str]:
    """Tiny random Llama target (2 layers, hidden 64) and a draft = the target with noise on
    every weight, so the draft agrees with the target often but not always."""
    from specbatch.traces.zoo import train_tokenizer
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = train_tokenizer([TEXT], 300)
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=128,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=512, tie_word_embeddings=False,
                         bos_token_id=tok.eos_token_id, eos_token_id=tok.eos_token_id,
                         pad_token_id=tok.eos_token_id)
    target = LlamaForCausalLM(config)
    with torch.no_grad():
        target.get_output_embeddings().weight.mul_(8.0)  # peaked rows
    draft = LlamaForCausalLM(config)
    draft.load_state_dict(target.state_dict())
    with torch.no_grad():
        for p in draft.parameters():
            p.add_(0.02 * torch.randn_like(p) * p.abs().mean())
    paths = []
    for role, model in (("draft", draft), ("target", target)):
        model.save_pretrained(out / role)
        tok.save_pretrained(out / role)
        paths.append(str(out / role))
    return paths[0], paths[1]


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """One torch thread: tiny models gain nothing from more, and the machine is shared."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    return _save_pair(tmp_path_factory.mktemp("livepair"))


@pytest.fixture(scope="module")
def models(pair):
    from specbatch.traces.capture import load_pair

    _, draft, target = load_pair(*pair)
    return draft, target


def _greedy(target, ids: list[int], n: int) -> list[int]:
    """The target's own greedy decoding, one request at a time, recomputing every prefix."""
    ids, out = list(ids), []
    with torch.no_grad():
        for _ in range(n):
            nxt = int(target(input_ids=torch.tensor([ids])).logits[0, -1].argmax())
            out.append(nxt)
            ids.append(nxt)
    return out


@pytest.fixture(scope="module")
def greedy(models):
    return [_greedy(models[1], ids, 12) for ids in IDS]


@pytest.mark.parametrize("policy,k,extra,rule,compact", [
    ("fixed", 3, 0, "token", 0.25),
    ("tetris", 2, 2, "token", 0.25),
    ("tetris", 2, 1, "block", 0.0),   # compact the caches after every step
    ("fixed", 4, 0, "block", 1.0),    # never compact: holes accumulate
])
def test_temperature_zero_output_equals_target_greedy(models, greedy, policy, k, extra, rule,
                                                      compact):
    cfg = LiveConfig(max_new_tokens=12, policy=policy, k=k, extra=extra, verify=rule,
                     compact_fraction=compact)
    result = run_live(*models, IDS, cfg)
    assert result.outputs == greedy
    # the draft agrees often enough that accepted tokens (and KV holes) are exercised
    assert 1.3 < result.summary["mal"] < k + extra + 1
    assert result.summary["accepted"] < result.summary["verified"]


def test_tetris_verifies_exactly_the_budget_and_fixed_verifies_k(models):
    tet = run_live(*models, IDS, LiveConfig(max_new_tokens=8, policy="tetris", k=2, extra=2))
    dec = tet.steps[tet.steps["batch"] > 0]
    assert (dec["verified"] == 2 * dec["batch"]).all()
    assert (dec["drafted"] == 4 * dec["batch"]).all()
    fix = run_live(*models, IDS, LiveConfig(max_new_tokens=8, policy="fixed", k=3, extra=5))
    dec = fix.steps[fix.steps["batch"] > 0]
    assert (dec["verified"] == 3 * dec["batch"]).all() and (dec["depth"] == 3).all()


@pytest.mark.parametrize("rule", ["token", "block"])
def test_theory_torch_verifier_and_local_replay_path_agree_at_temperature_one(models, rule):
    pytest.importorskip("specbatch.theory.verify_torch")
    runs = [run_live(*models, IDS, LiveConfig(max_new_tokens=10, policy="tetris", k=2, extra=1,
                                               verify=rule, temperature=1.0, seed=3,
                                               verifier=verifier))
            for verifier in ("theory", "local")]
    assert runs[0].summary["verifier"] == "specbatch.theory.verify_torch"
    assert runs[0].outputs == runs[1].outputs
    assert (runs[0].steps["accepted"] == runs[1].steps["accepted"]).all()


def _run(capsys, *args):
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture(scope="module")
def prompts_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("prompts") / "prompts.jsonl"
    path.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in PROMPTS))
    return str(path)


def test_live_cli_writes_the_simulator_tables_and_validate_replays_them(pair, prompts_file,
                                                                        tmp_path, capsys):
    out = tmp_path / "live"
    code, stdout, _ = _run(capsys, "live", "--draft", pair[0], "--target", pair[1], "--prompts",
                           prompts_file, "--max-new-tokens", "10", "--policy", "tetris", "--k",
                           "2", "--extra", "1", "--verify", "block", "--temperature", "1.0",
                           "--warmup", "0", "--profile-grid", "--grid-repeats", "1", "--out",
                           str(out), "--json")
    assert code == 0
    printed = json.loads(stdout)
    assert printed["tokens"] == 10 * len(PROMPTS) and printed["throughput"] > 0
    requests = pd.read_parquet(out / "requests.parquet")
    steps = pd.read_parquet(out / "steps.parquet")
    assert tuple(requests.columns) == REQUEST_COLUMNS
    assert tuple(steps.columns) == STEP_COLUMNS
    assert (requests["tokens"] == 10).all() and (requests["finish"] > requests["first_token"]).all()
    summary = json.loads((out / "summary.json").read_text())
    for key in ("throughput", "e2e_mean", "mal", "vsr", "draft_efficiency", "makespan"):
        assert summary[key] is not None and np.isfinite(summary[key])
    profile = pd.read_csv(out / "profile.csv")
    for col in ("model", "role", "device", "dtype", "batch_size", "query_tokens", "kv_tokens",
                "latency_s"):
        assert col in profile.columns
    manifest = json.loads((out / "live.json").read_text())
    for key in ("policy", "k", "extra", "verify", "seed", "device", "dtype", "temperature"):
        assert key in manifest["settings"]
    assert manifest["models"]["target"]["shape"]["layers"] == 2
    assert len(manifest["prompt_len"]) == len(PROMPTS)

    grid = pd.read_csv(out / "profile_grid.csv")  # the run's (batch, query, KV) cells
    assert set(grid["role"]) == {"draft", "target"}
    assert set(grid["batch_size"]) == {5, 3, 2, 1}
    assert set(grid.loc[grid["role"] == "target", "query_tokens"]) >= {1, 2, 3, 4}

    for flags, source in (([], "profile_grid.csv"), (["--in-sample"], "in-sample")):
        code, stdout, err = _run(capsys, "validate", str(out), *flags, "--json")
        assert code == 0, err
        report = json.loads(stdout)
        assert source in report["cost_model"]
        assert report["trajectory_match"] is True  # same positions, same τ: same steps
        assert report["simulated"]["steps"] == report["measured"]["steps"] == len(steps)
        assert report["simulated"]["tokens"] == report["measured"]["tokens"]
        for key in ("throughput", "step_latency_mean", "decode_step_latency_mean"):
            assert np.isfinite(report["relative_error"][key])
    files = []  # external profiles, one per role (the live passes, three times each)
    for role in ("draft", "target"):
        files.append(str(tmp_path / f"{role}.csv"))
        pd.concat([profile[profile["role"] == role]] * 3).to_csv(files[-1], index=False)
    sim_out = tmp_path / "sim"
    code, stdout, err = _run(capsys, "validate", str(out), "--profile", *files, "--overhead",
                             "0", "--out", str(sim_out))
    assert code == 0, err
    assert "throughput" in stdout and "rel. error" in stdout
    saved = json.loads((sim_out / "validate.json").read_text())
    assert saved["overhead_per_step"] == 0 and "target.csv" in saved["cost_model"]
    assert (sim_out / "steps.parquet").is_file()


def test_live_runs_random_weights_of_a_named_shape_on_random_prompts(tmp_path, capsys):
    out = tmp_path / "shape"
    code, stdout, err = _run(capsys, "live", "--draft", "vicuna-68m", "--target", "vicuna-68m",
                             "--layers", "1", "--prompts", "random:2:6", "--max-new-tokens", "4",
                             "--temperature", "1", "--warmup", "0", "--out", str(out), "--json")
    assert code == 0, err
    assert json.loads(stdout)["tokens"] == 8
    manifest = json.loads((out / "live.json").read_text())
    assert manifest["models"]["target"]["name"] == "vicuna-68m@1L"
    assert manifest["models"]["target"]["weights"].startswith("random")


def test_validate_reproduces_the_trajectory_at_temperature_zero(models, tmp_path):
    from specbatch.analysis.live import write_live

    result = run_live(*models, IDS, LiveConfig(max_new_tokens=9, policy="fixed", k=3))
    write_live(result, tmp_path / "live", {"models": {}})
    report = validate(tmp_path / "live")
    assert report["trajectory_match"] is True
    assert report["simulated"]["mal"] == pytest.approx(result.summary["mal"])


@pytest.mark.parametrize("args,needle", [
    (["live", "--draft", "/no/such/draft", "--target", "/no/such/target", "--prompts",
      "default:2", "--out", "OUT"], "draft model /no/such/draft"),
    (["live", "--draft", "D", "--target", "T", "--prompts", "/no/such/prompts.jsonl", "--out",
      "OUT", "--policy", "nope"], "--policy"),
    (["validate", "/no/such/live_dir"], "LIVE_DIR /no/such/live_dir"),
])
def test_bad_paths_are_one_line_errors_with_exit_2(args, needle, tmp_path, capsys):
    args = [str(tmp_path / "out") if a == "OUT" else a for a in args]
    code, _, err = _run(capsys, *args)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in err


def test_validate_of_a_directory_without_a_live_run_is_a_one_line_error(tmp_path, capsys):
    code, _, err = _run(capsys, "validate", str(tmp_path))
    assert code == 2 and "live.json" in err and len(err.strip().splitlines()) == 1
