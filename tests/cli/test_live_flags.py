"""``specbatch live`` flags are generated from LiveConfig's fields: their defaults show in
``--help``, bad values are one-line usage errors, and a greedy run says that block
verification is token verification."""

from __future__ import annotations

import json

import pytest

from specbatch.cli import main
from specbatch.live.config import NGRAM, LiveConfig, live_specs


def live_help(capsys) -> str:
    with pytest.raises(SystemExit):
        main(["live", "--help"])
    return " ".join(capsys.readouterr().out.split())


def test_help_shows_every_setting_with_its_default(capsys):
    text = live_help(capsys)
    for spec in live_specs().values():
        if spec.flag:
            assert spec.option in text, spec.option
    assert "--temperature FLOAT sampling temperature T" in text
    assert "(capture's default is T = 1) (default: 0.0)" in text
    assert "--k INT window k" in text and "(default: 3)" in text
    assert "--dtype STR weights and activations dtype; one of float32, float16, bfloat16" in text


def test_capture_help_says_its_temperature_default(capsys):
    with pytest.raises(SystemExit):
        main(["capture", "--help"])
    assert "default: 1, while live defaults to 0" in " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize("flags, words", [
    (["--k", "three"], "argument --k: expected an integer, got 'three'"),
    (["--seed", str(2 ** 70)], "argument --seed: expected an integer within the int64 range"),
    (["--temperature", "hot"], "argument --temperature: expected a number, got 'hot'"),
])
def test_bad_flag_values_are_one_line_usage_errors(flags, words, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["live", "--draft", "x", "--target", "y", "--prompts", "random:1:2", *flags,
              "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.count("\n") == 1 and words in err


def test_dtype_outside_its_choices_names_the_flag():
    from specbatch.errors import SpecbatchError

    with pytest.raises(SpecbatchError, match="--dtype: expected one of float32, float16"):
        LiveConfig(dtype="float64").check()


def test_the_ngram_name_is_the_drafters():
    from specbatch.traces.capture.ngram import NGRAM as DRAFTER

    assert NGRAM == DRAFTER


def test_greedy_block_verification_is_said_to_equal_token_verification(tmp_path, capsys):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    args = ["live", "--draft", "vicuna-68m", "--target", "vicuna-68m", "--layers", "1",
            "--prompts", "random:2:4", "--max-new-tokens", "2", "--k", "1", "--warmup", "0",
            "--verify", "block", "--json", "--out", str(tmp_path / "live")]
    assert main(args) == 0
    captured = capsys.readouterr()
    json.loads(captured.out)
    assert "note: at temperature 0 the target's law is one-hot, so block verification " \
           "accepts exactly what token verification does" in captured.err
