"""LLMServingSim's per-layer kernel profiles of the GPUs of the measured vLLM runs (the
importer the calibrated cost reads on the RTX 4090 and RTX PRO 6000).

casys-kaist/LLMServingSim's profiler (``profiler/core``, vLLM 0.19, ``enforce_eager``, dummy
weights, one decoder layer, tensor parallelism emulated on one GPU with per-rank shapes)
writes, per GPU, model and tp degree, ``profiler/perf/<GPU>/<model>/bf16/tp<N>/``:

``dense.csv``  ``layer, tokens, time_us``
    one timed module per row (``embedding``, ``layernorm``, ``qkv_proj``, ``qk_norm``,
    ``rotary_emb``, ``o_proj``, ``gate_up_proj``, ``act_fn``, ``down_proj``,
    ``final_layernorm``) at ``tokens`` tokens in the pass;
``per_sequence.csv``  ``layer, sequences, time_us``
    ``lm_head`` (vLLM's LogitsProcessor) and ``sampler`` at ``sequences`` rows;
``attention.csv``  ``prefill_chunk, kv_prefill, n_decode, kv_decode, time_us``
    one Attention module call over a batch of one prefill chunk of ``prefill_chunk`` tokens
    after ``kv_prefill`` cached ones (0: none) and ``n_decode`` decodes with ``kv_decode``
    cached tokens each;
``moe.csv``  ``tokens, activated_experts, time_us``
    the MoE block of one rank.

Bundled (a subset; PROVENANCE.json names each file's source path and git blob):
``traces/data/vllm_runs/profiles/<gpu>-<model>-tp<N>-<kind>.csv`` (attention.csv
gzip-compressed, ``.csv.gz``). The model's shape is the config.json of the bundled run of the
same model. A bad file is a one-line error naming the file, column and row.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from specbatch.errors import SpecbatchError, require
from specbatch.traces.public.vllm_runs import BUNDLED_DIR, bundled_runs

if TYPE_CHECKING:  # read where a profile is read, not at import
    import pandas as pd

PROFILE_DIR = BUNDLED_DIR / "profiles"
#: Columns of each kind of file (the key columns, then ``time_us``).
KINDS = {"dense": ("layer", "tokens"), "per_sequence": ("layer", "sequences"),
         "attention": ("prefill_chunk", "kv_prefill", "n_decode", "kv_decode"),
         "moe": ("tokens", "activated_experts")}
NAME = re.compile(r"^(?P<gpu>[a-z0-9]+)-(?P<model>.+)-tp(?P<tp>\d+)-(?P<kind>"
                  + "|".join(KINDS) + r")\.csv(\.gz)?$")


def read_profile(path: str | Path, kind: str) -> pd.DataFrame:
    """One LLMServingSim profile file of ``kind`` (module docstring), rows sorted by its key
    columns; a repeated header line (the writer appends per run) is dropped."""
    import pandas as pd

    path = Path(path)
    require(kind in KINDS, f"profile kind {kind!r}: expected one of {', '.join(KINDS)}")
    try:
        frame = pd.read_csv(path, dtype=str)
    except (OSError, ValueError, pd.errors.ParserError) as exc:
        raise SpecbatchError(f"{path}: cannot read as CSV ({str(exc).splitlines()[0]})") from None
    cols = (*KINDS[kind], "time_us")
    for col in cols:
        require(col in frame.columns, f"{path}: column {col!r} missing; expected LLMServingSim's "
                f"{kind}.csv layout ({', '.join(cols)})")
    if "layer" in cols:
        frame = frame[frame["layer"] != "layer"]
    out = {}
    for col in cols:
        if col == "layer":
            out[col] = frame[col].to_numpy(dtype=object)
            continue
        values = pd.to_numeric(frame[col], errors="coerce").to_numpy(dtype=np.float64)
        bad = ~np.isfinite(values) | (values < 0) | ((values <= 0) if col == "time_us" else False)
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            raise SpecbatchError(f"{path}: column {col!r} row {frame.index[row] + 2}: expected a "
                                 f"finite {'positive' if col == 'time_us' else 'non-negative'} "
                                 f"number, got {frame[col].iloc[row]!r}")
        out[col] = values
    require(len(frame) > 0, f"{path}: no rows; expected LLMServingSim's {kind}.csv")
    return pd.DataFrame(out).sort_values(list(KINDS[kind]), kind="stable").reset_index(drop=True)


@dataclass(frozen=True)
class ProfileSet:
    """The bundled files of one (GPU, model, tp): kind -> path; ``config`` the model's
    config.json (a bundled run's)."""

    gpu: str
    model: str
    tp: int
    files: dict
    config: Path


def model_config(model: str) -> Path:
    """The config.json of the bundled run serving ``model`` (any GPU)."""
    for name in bundled_runs():
        if name.split("-", 1)[1] == model:
            return BUNDLED_DIR / name / "config.json"
    raise SpecbatchError(f"profile model {model!r}: expected one of the bundled runs' models")


@functools.lru_cache(maxsize=1)
def bundled_profiles() -> dict[tuple[str, str, int], ProfileSet]:
    """(gpu, model, tp) -> :class:`ProfileSet` of every bundled profile file."""
    groups: dict = {}
    for path in sorted(PROFILE_DIR.iterdir()):
        m = NAME.match(path.name)
        if m is None:
            continue
        key = (m["gpu"], m["model"], int(m["tp"]))
        groups.setdefault(key, {})[m["kind"]] = path
    return {key: ProfileSet(*key, files, model_config(key[1]))
            for key, files in sorted(groups.items())}


def profile_gpus() -> tuple[str, ...]:
    """The hardware presets the bundled profiles cover."""
    return tuple(sorted({gpu for gpu, _, _ in bundled_profiles()}))
