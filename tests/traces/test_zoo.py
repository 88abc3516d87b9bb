"""The offline model pair (traces/zoo.py, `specbatch zoo train`) and the local prompt sources
(traces/prompts.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from theory.errors import SpecbatchError  # noqa: E402
from traces.prompts import (  # noqa: E402
    Prompt,
    default_prompts,
    is_heldout,
    load_prompts,
    stdlib_source_files,
    write_prompts_jsonl,
)
from traces.zoo import ZOO_SIZES, train_zoo  # noqa: E402


@pytest.fixture(scope="module")
def zoo(tmp_path_factory):
    out = tmp_path_factory.mktemp("zoo")
    return out, train_zoo(out / "a", "tiny", seed=3, steps=4)


def test_zoo_trains_a_shared_tokenizer_pair_that_capture_loads(zoo):
    from traces.capture import load_pair

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
    from traces.zoo import make_model

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
    from analysis.cli import main

    with pytest.raises(SystemExit):
        main(["zoo", "train", "--help"])
    assert "example:" in capsys.readouterr().out


def test_capture_prompt_spec_default_n_and_errors(tmp_path):
    from traces.capture_cli import resolve_prompts

    prompts, source = resolve_prompts("default:5:1", None)
    assert [p.category for p in prompts].count("code") == 3 and len(prompts) == 5
    assert "seed 1" in source
    with pytest.raises(SpecbatchError, match="default:N"):
        resolve_prompts("default:many", None)
