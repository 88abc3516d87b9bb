"""The offline model pair (traces/models/zoo.py, `specbatch zoo train`) and the local prompt sources
(traces/capture/prompts.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from specbatch.errors import SpecbatchError  # noqa: E402
from specbatch.traces.capture.prompts import (  # noqa: E402
    Prompt,
    default_prompts,
    load_prompts,
    write_prompts_jsonl,
)
from specbatch.traces.corpus import is_heldout, stdlib_source_files  # noqa: E402
from specbatch.traces.models.zoo import ZOO_SIZES, train_zoo  # noqa: E402


@pytest.fixture(scope="module")
def zoo(tmp_path_factory):
    out = tmp_path_factory.mktemp("zoo")
    return out, train_zoo(out / "a", "tiny", seed=3, steps=4)


def test_zoo_trains_a_shared_tokenizer_pair_that_capture_loads(zoo):
    from specbatch.traces.capture.chain import load_pair

    out, report = zoo
    assert report["target"]["params"] > 5 * report["draft"]["params"]
    for role in ("draft", "target"):
        assert np.isfinite(report[role]["heldout_loss"]) and report[role]["heldout_loss"] > 0
    assert json.loads((out / "a" / "zoo.json").read_text())["seed"] == 3
    tok, draft, target = load_pair(str(out / "a" / "draft"), str(out / "a" / "target"))
    assert len(tok) == report["vocab"] == draft.config.vocab_size == target.config.vocab_size
    assert tok.decode(tok("def f(x):\n    return x")["input_ids"]) == "def f(x):\n    return x"


def test_zoo_is_deterministic_for_a_seed(zoo):
    out, report = zoo
    again = train_zoo(out / "b", "tiny", seed=3, steps=4)
    assert again["draft"]["heldout_loss"] == report["draft"]["heldout_loss"]
    assert again["target"]["heldout_loss"] == report["target"]["heldout_loss"]
    for role in ("draft", "target"):
        assert ((out / "a" / role / "model.safetensors").read_bytes()
                == (out / "b" / role / "model.safetensors").read_bytes())


def test_zoo_sizes_have_a_target_about_ten_times_the_draft():
    from specbatch.traces.models.zoo import make_model

    for name in ("tiny", "small"):
        size = ZOO_SIZES[name]
        d = sum(p.numel() for p in make_model(size.draft, size.vocab, 64, 0).parameters())
        t = sum(p.numel() for p in make_model(size.target, size.vocab, 64, 0).parameters())
        assert 5 <= t / d <= 15, (name, t / d)
    with pytest.raises(SpecbatchError, match="zoo size"):
        train_zoo("/nonexistent", "huge")


def test_default_prompts_are_code_and_prose_from_held_out_files():
    prompts = default_prompts(4, 3, seed=1)
    assert [p.category for p in prompts] == ["code", "prose"] * 3 + ["code"]
    assert all(200 <= len(p.text) <= 1200 for p in prompts if p.category == "code")
    assert prompts == default_prompts(4, 3, seed=1)
    assert prompts != default_prompts(4, 3, seed=2)
    heldout = {f.read_text(encoding="utf-8") for i, f in enumerate(stdlib_source_files())
               if is_heldout(i)}
    for p in prompts:
        if p.category == "code":
            assert any(p.text in doc for doc in heldout)


def test_prompt_files_jsonl_sharegpt_and_text(tmp_path):
    jsonl = tmp_path / "p.jsonl"
    write_prompts_jsonl([Prompt("a b", "code"), Prompt("c", "prose")], jsonl)
    assert load_prompts(jsonl) == [Prompt("a b", "code"), Prompt("c", "prose")]
    share = tmp_path / "s.json"
    share.write_text(json.dumps([{"conversations": [{"from": "human", "value": "hi there"},
                                                    {"from": "gpt", "value": "hello"}]},
                                 {"conversations": [{"from": "human", "value": "2nd"}]}]))
    assert [p.text for p in load_prompts(share)] == ["hi there", "2nd"]
    text = tmp_path / "p.txt"
    text.write_text("first prompt\n\nsecond prompt\n")
    assert [p.text for p in load_prompts(text, limit=5)] == ["first prompt", "second prompt"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "x"}\n{"prompt": 3}\n')
    with pytest.raises(SpecbatchError, match="field prompt: expected a string"):
        load_prompts(bad)
    with pytest.raises(SpecbatchError, match="no such file"):
        load_prompts(tmp_path / "missing.jsonl")


def test_zoo_cli_help_has_an_example(capsys):
    from specbatch.cli import main

    with pytest.raises(SystemExit):
        main(["zoo", "train", "--help"])
    assert "example:" in capsys.readouterr().out


def test_capture_prompt_spec_default_n_and_errors(tmp_path):
    from specbatch.traces.capture.prompts import resolve_prompts

    prompts, source = resolve_prompts("default:5:1", None)
    assert [p.category for p in prompts].count("code") == 3 and len(prompts) == 5
    assert "seed 1" in source
    with pytest.raises(SpecbatchError, match="default:N"):
        resolve_prompts("default:many", None)


def test_max_seconds_stops_between_steps_and_still_saves_loadable_models(tmp_path, monkeypatch):
    """With the probe's plan left at the requested 10,000 steps, the loop itself stops once the
    budget is spent; held-out loss, zoo.json and both model dirs are still written."""
    import specbatch.traces.models.zoo as zoo_mod
    from specbatch.traces.capture.chain import load_pair

    monkeypatch.setattr(zoo_mod, "plan_steps",
                        lambda models, cfg, batch, steps, *a: (steps, {"planned_steps": steps}))
    report = train_zoo(tmp_path / "z", "tiny", seed=1, steps=10_000, max_seconds=0.5)
    assert 1 <= report["steps_done"] < 10_000 and report["stopped_early"] is True
    assert report["steps"] == report["steps_requested"] == 10_000
    assert report["reproduce"] == f"--seed 1 --steps 10000 --max-steps {report['steps_done']}"
    assert report["seconds"]["train"] < 0.5 + 5  # one step past the budget at most
    assert set(report["seconds"]) == {"tokenizer", "train", "eval", "total"}
    saved = json.loads((tmp_path / "z" / "zoo.json").read_text())
    assert saved["steps_done"] == report["steps_done"] and saved["max_seconds"] == 0.5
    assert np.isfinite(saved["target"]["heldout_loss"])
    tok, draft, target = load_pair(str(tmp_path / "z" / "draft"), str(tmp_path / "z" / "target"))
    assert draft.config.vocab_size == target.config.vocab_size == len(tok)


def test_max_seconds_plans_a_shorter_schedule_and_max_steps_replays_it(tmp_path):
    """The probe shortens a 10,000-step schedule to what fits in 1 s; the recorded options
    replay a cut run bit for bit (same seed, schedule and steps_done => same weights)."""
    report = train_zoo(tmp_path / "a", "tiny", seed=2, steps=10_000, max_seconds=1.0)
    assert report["stopped_early"] is True and report["steps"] < 10_000
    assert report["plan"]["planned_steps"] == report["steps"]
    assert report["steps_done"] <= report["steps"]
    cap = report["steps_done"] if report["steps_done"] < report["steps"] else None
    replay = train_zoo(tmp_path / "b", "tiny", seed=2, steps=report["steps"], max_steps=cap)
    assert replay["steps_done"] == report["steps_done"]
    assert replay["target"]["heldout_loss"] == report["target"]["heldout_loss"]
    for role in ("draft", "target"):
        assert ((tmp_path / "a" / role / "model.safetensors").read_bytes()
                == (tmp_path / "b" / role / "model.safetensors").read_bytes())
    cut = train_zoo(tmp_path / "c", "tiny", seed=2, steps=30, max_steps=3)
    assert cut["steps_done"] == 3 and cut["steps"] == 30 and cut["stopped_early"] is True
    assert cut["draft_steps_done"] == 3 and cut["tokens_seen"]["target"] == 3 * 8 * 64
    assert cut["reproduce"] == "--seed 2 --steps 30 --max-steps 3"


@pytest.mark.parametrize("args, message", [
    (["--max-seconds", "0"], "--max-seconds: expected a positive number"),
    (["--max-seconds", "nan"], "--max-seconds: expected a positive number"),
    (["--max-steps", "0"], "--max-steps: expected a positive integer"),
    (["--steps", "0"], "--steps: expected a positive integer"),
    (["--dtype", "bfloat16"], "--dtype bfloat16: expected --device cuda"),
])
def test_zoo_cli_bad_budget_or_dtype_is_a_one_line_error(tmp_path, capsys, args, message):
    from specbatch.cli import main

    code = main(["zoo", "train", "--out", str(tmp_path / "z"), *args])
    err = capsys.readouterr().err
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "z").exists()


def test_zoo_cli_json_has_stage_seconds_and_steps_done(tmp_path, capsys):
    from specbatch.cli import main

    assert main(["zoo", "train", "--out", str(tmp_path / "z"), "--steps", "2", "--tf32",
                 "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["steps_done"] == 2 and summary["stopped_early"] is False
    assert summary["tf32"] is True and summary["reproduce"] == "--seed 0 --steps 2 --tf32"
    assert set(summary["stage_seconds"]) == {"tokenizer", "train", "eval", "total"}
    assert torch.backends.cuda.matmul.allow_tf32 is False  # restored after training
