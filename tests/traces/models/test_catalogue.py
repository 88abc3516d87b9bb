"""traces.models.catalogue: Hugging Face ids resolve offline to shapes; every bundled
config.json has provenance and reads to the parameter count its model card publishes."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from specbatch.traces.models.catalogue import CATALOGUE, canonical, hf_id, published_head
from specbatch.traces.models.shapes import SHAPES, get_shape

CONFIGS = Path(__file__).resolve().parents[3] / "traces" / "data" / "configs"
#: id -> (total, active) parameters in billions as the model cards publish them, and the
#: relative tolerance (gpt-oss's "active" excludes one embedding matrix: checked on totals)
PUBLISHED = {
    "meta-llama/Llama-3.2-3B-Instruct": (3.21, None),
    "Qwen/Qwen3-8B": (8.2, None),
    "Qwen/Qwen3-32B": (32.8, None),
    "Qwen/Qwen3-235B-A22B": (235.0, 22.0),
    "mistralai/Mistral-7B-Instruct-v0.3": (7.25, None),
    "openai/gpt-oss-20b": (21.0, None),
    "openai/gpt-oss-120b": (117.0, None),
    "google/gemma-3-1b-it": (1.0, None),
    # 109 B with the vision tower, which the text model's shape does not count (107.8 B)
    "meta-llama/Llama-4-Scout-17B-16E-Instruct": (109.0, 17.0),
}


@pytest.mark.parametrize("model_id", sorted(CATALOGUE))
def test_every_id_resolves_offline_case_insensitively(model_id):
    shape = get_shape(model_id.lower())
    assert shape.name == model_id == canonical(model_id.upper())
    where = CATALOGUE[model_id]
    if not where.startswith("configs/"):  # a built-in shape: the same numbers
        same = dataclasses.replace(SHAPES[where], name=model_id)
        assert shape == same


@pytest.mark.parametrize("model_id, published", sorted(PUBLISHED.items()))
def test_bundled_configs_read_to_their_published_sizes(model_id, published):
    shape = get_shape(model_id)
    total, active = published
    assert shape.params / 1e9 == pytest.approx(total, rel=0.02)
    if active is not None:
        assert shape.active_params / 1e9 == pytest.approx(active, rel=0.02)


def test_every_bundled_config_has_provenance():
    provenance = json.loads((CONFIGS / "provenance.json").read_text())["configs"]
    for where in CATALOGUE.values():
        if where.startswith("configs/"):
            key = where.removeprefix("configs/") + "/config.json"
            assert key in provenance and provenance[key]["repository"].startswith("https://")
            assert (CONFIGS / key).is_file()


def test_engine_ids_of_shapes_and_published_heads():
    assert hf_id("vicuna-68m") == "JackFram/llama-68m"
    assert hf_id("llama-3.1-8b") == "meta-llama/Llama-3.1-8B"
    assert hf_id("./my/config.json") == "./my/config.json"
    assert published_head("meta-llama/Llama-3.1-8B-Instruct", "eagle3") == \
        "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"
    assert published_head("vicuna-33b", "eagle3") is None
