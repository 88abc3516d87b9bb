"""Live runs on random weights of a named shape, on random prompts."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from specbatch.errors import SpecbatchError  # noqa: E402
from specbatch.live.model_pair import random_prompts  # noqa: E402
from tests.live.helpers import run_cli  # noqa: E402


def test_live_runs_random_weights_of_a_named_shape_on_random_prompts(tmp_path, capsys):
    out = tmp_path / "shape"
    code, stdout, err = run_cli(capsys, "live", "--draft", "vicuna-68m", "--target",
                                "vicuna-68m", "--layers", "1", "--prompts", "random:2:6",
                                "--max-new-tokens", "4", "--temperature", "1", "--warmup", "0",
                                "--out", str(out), "--json")
    assert code == 0, err
    assert json.loads(stdout)["tokens"] == 8
    manifest = json.loads((out / "live.json").read_text())
    assert manifest["models"]["target"]["name"] == "vicuna-68m@1L"
    assert manifest["models"]["target"]["weights"].startswith("random")


def test_random_prompts_are_seeded_and_bad_specs_are_one_line_errors():
    ids, source = random_prompts("random:3:5:7", vocab=11)
    assert len(ids) == 3 and all(len(p) == 5 and max(p) < 11 for p in ids)
    assert ids == random_prompts("random:3:5:7", vocab=11)[0] and "seed 7" in source
    with pytest.raises(SpecbatchError, match="random:N:LEN"):
        random_prompts("random:x:5", vocab=11)
