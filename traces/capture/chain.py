"""Capture a trace from a live draft/target pair of Hugging Face causal LMs.

:func:`capture` loads the pair (:func:`load_pair`), encodes the prompts and records each request's
position rows with :mod:`specbatch.traces.capture.positions` (the target's reference output, then K
drafted tokens per output position and their THEORY.md §3 statistics), one positions file per chunk
of requests. After every chunk the directory is a valid trace of the completed requests, and
``meta.json`` records enough (content fingerprint, per-request status, chunking) for ``--resume`` to
finish an interrupted run with the same numbers.

The drafter is a draft model directory, or :data:`~specbatch.traces.capture.ngram.NGRAM` (``--draft
ngram``): prompt-lookup drafting (:mod:`specbatch.traces.capture.ngram`), no draft model loaded,
bounds ``ngram_min``/``ngram_max`` in the config (vLLM's defaults), its identity in ``meta.json``'s
``models.draft`` and its settings in the fingerprint. A draft model samples its K tokens
(``draft_sample_method = "probabilistic"``, the default) or proposes its argmax chain (``"greedy"``,
vLLM's default: one-hot rows, :class:`~specbatch.traces.capture.drafters.ModelDrafter`); the method
is recorded in ``meta.json`` (``draft_sample_method`` and ``capture``) and, when greedy, in the
fingerprint.

Model loading lives in :mod:`specbatch.traces.capture.loading`, the resumable run state (status,
chunking, the files rewritten after each chunk) in :mod:`specbatch.traces.capture.resume`.
The loaders and the per-request functions are re-exported here (``load_pair``,
``capture_request``, ``capture_positions``, ``capture_request_naive``, ...).
"""

from __future__ import annotations

import hashlib
import json
import platform
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from specbatch.errors import require
from specbatch.io import prepare_output_dir
from specbatch.traces.capture.drafters import ModelDrafter
from specbatch.traces.capture.loading import load_pair, load_target
from specbatch.traces.capture.ngram import NGRAM, NgramDrafter, ngram_bounds
from specbatch.traces.capture.positions import (
    append_path_stats,
    capture_positions,
    capture_request,
    capture_request_naive,
    encode_prompt,
    generate_reference,
    generate_reference_batch,
    request_uniforms,
)
from specbatch.traces.capture.prompts import Prompt
from specbatch.traces.capture.resume import STATUS_DONE, flush_run, split_chunks, start_run
from specbatch.traces.format.identity import model_identity, portable_command, portable_path
from specbatch.traces.format.trace import LIST_COLUMNS, PROPOSED

__all__ = [
    "CaptureConfig", "append_path_stats", "capture", "capture_positions", "capture_request",
    "capture_request_naive", "encode_prompt", "generate_reference", "generate_reference_batch",
    "load_pair", "load_target", "model_identity", "request_uniforms",
]

PROBABILISTIC, GREEDY = "probabilistic", "greedy"
DRAFT_SAMPLE_METHODS = (PROBABILISTIC, GREEDY)


@dataclass(frozen=True)
class CaptureConfig:
    """Everything that determines a capture's content (recorded in meta.json)."""

    max_new_tokens: int = 128
    depth: int = 8                 # K drafted tokens per position
    temperature: float = 1.0
    seed: int = 0
    batch_size: int = 32           # positions per batched draft/target pass
    max_prompt_tokens: int = 512   # longer prompts keep their last tokens
    stop_at_eos: bool = True       # the reference output ends after the target's EOS
    chunk_requests: int = 8        # requests per positions file (the unit of --resume)
    store_dtype: str = "float64"   # float columns on disk: float64 or float32 (half the size)
    chat_template: bool = False    # wrap each prompt as a user turn in the tokenizer's template
    ngram_min: int | None = None   # n-gram drafter only: prompt_lookup_min (None: model draft)
    ngram_max: int | None = None   # n-gram drafter only: prompt_lookup_max
    draft_sample_method: str = PROBABILISTIC  # draft model only: "probabilistic" or "greedy"
    tree: str | None = None        # draft-tree shape "2,2,1" (children per depth): a v2 trace
    tree_sampling: str = "topk"    # tree children: "topk" (EAGLE) or "iid" (SpecInfer)

    def content_key(self) -> dict:
        """Fields that change the captured numbers (batch size and chunking do not; a plain
        prompt and probabilistic drafting leave the key as it was before those options)."""
        d = asdict(self)
        for k in ("batch_size", "chunk_requests"):
            d.pop(k)
        if not d["chat_template"]:
            d.pop("chat_template")
        if d["draft_sample_method"] == PROBABILISTIC:
            d.pop("draft_sample_method")
        for k in ("ngram_min", "ngram_max"):
            if d[k] is None:
                d.pop(k)
        if d["tree"] is None:
            d.pop("tree")
            d.pop("tree_sampling")
        return d

    def tree_shape(self):
        """The draft tree's :class:`~specbatch.theory.trees.tree_shapes.Shape`, or None (chains)."""
        if self.tree is None:
            return None
        from specbatch.theory.trees.tree_shapes import parse_shape

        return parse_shape(self.tree, self.tree_sampling)


# ----------------------------------------------------------------------------- whole capture
def _fingerprint(prompts: list[Prompt], cfg: CaptureConfig, draft: str, target: str) -> str:
    h = hashlib.sha256()
    h.update(json.dumps(cfg.content_key(), sort_keys=True).encode())
    drafter = NGRAM if draft == NGRAM else str(Path(draft).resolve())  # settings: in the key
    h.update(json.dumps([drafter, str(Path(target).resolve())]).encode())
    for p in prompts:
        h.update(json.dumps([p.text, p.category]).encode())
    return h.hexdigest()[:16]


def _zoo_provenance(draft_path: str, target_path: str) -> dict | None:
    """The zoo report (``zoo.json``) when both models come from one ``specbatch zoo train``."""
    parent = Path(draft_path).resolve().parent
    report = parent / "zoo.json"
    if Path(target_path).resolve().parent != parent or not report.is_file():
        return None
    try:
        z = json.loads(report.read_text())
    except (json.JSONDecodeError, OSError):
        return None
    extra = "".join(f" --corpus {c}" for c in z.get("corpus", [])[2:])
    return {
        "size": z.get("size"), "seed": z.get("seed"), "steps": z.get("steps"),
        "vocab": z.get("vocab"), "threads": z.get("threads"),
        "draft_heldout_loss": z.get("draft", {}).get("heldout_loss"),
        "target_heldout_loss": z.get("target", {}).get("heldout_loss"),
        "draft_params": z.get("draft", {}).get("params"),
        "target_params": z.get("target", {}).get("params"),
        # zoo.json's ``reproduce`` holds the options that replay the same weights (schedule
        # length, --max-steps of a time-budgeted run, dtype, tf32); older reports lack it.
        "command": f"specbatch zoo train --out {portable_path(parent)} --size {z.get('size')} "
                   + (z.get("reproduce") or f"--seed {z.get('seed')} --steps {z.get('steps')}")
                   + (f" --threads {z['threads']}" if z.get("threads") else "") + extra,
    }


def _library_versions() -> dict:
    import pyarrow
    import tokenizers
    import torch
    import transformers

    return {"python": platform.python_version(), "numpy": np.__version__,
            "torch": torch.__version__, "transformers": transformers.__version__,
            "tokenizers": tokenizers.__version__, "pyarrow": pyarrow.__version__}


def capture(draft_path: str, target_path: str, prompts: list[Prompt], out: str | Path,
            cfg: CaptureConfig, device: str = "cpu", dtype: str = "float32",
            resume: bool = False, progress: bool = True, prompt_source: str | None = None,
            command: str | None = None, extra_meta: dict | None = None,
            stop_after_chunks: int | None = None) -> dict:
    """Capture a trace directory ``out`` (one positions file per chunk of requests).

    After each chunk ``positions-<chunk>.parquet``, ``requests.parquet`` (completed requests)
    and ``meta.json`` (``completion``: per-request ``done``/``pending``) are rewritten
    atomically, so at every instant ``out`` is a valid trace of the completed requests.
    ``resume`` keeps the chunks meta.json marks done (same content key required) and
    captures the rest; the result equals an uninterrupted run. Returns the final meta.
    """
    import torch
    from tqdm import tqdm

    from specbatch.traces.format.files import read_trace, write_positions

    cfg = _drafter_config(cfg, draft_path)
    _check_config(cfg, prompts)
    out = Path(out)
    run = start_run(out, resume, _fingerprint(prompts, cfg, draft_path, target_path), cfg,
                     len(prompts))
    cfg = run["cfg"]
    prepare_output_dir(out, allow_existing=True)  # non-empty only when resuming (checked above)
    torch.manual_seed(cfg.seed)
    if draft_path == NGRAM:
        tokenizer, target = load_target(target_path, device, dtype)
        draft = NgramDrafter(cfg.ngram_min, cfg.ngram_max,
                             target.get_output_embeddings().weight.shape[0])
    else:
        tokenizer, model, target = load_pair(draft_path, target_path, device, dtype)
        draft = ModelDrafter(model, draft_path, greedy=cfg.draft_sample_method == GREEDY)
    meta = _capture_meta(cfg, tokenizer, (draft, draft_path), (target, target_path), device,
                         dtype, prompt_source, command, extra_meta)
    flush_run(out, meta, run)  # meta.json exists before any positions file: always resumable
    status = run["status"]
    bar = tqdm(total=len(prompts), disable=not progress, file=sys.stderr, unit="req",
               desc="capture", initial=sum(s == STATUS_DONE for s in status))
    written = 0
    for c, members in enumerate(split_chunks(len(prompts), cfg.chunk_requests)):
        if all(status[i] == STATUS_DONE for i in members) and \
                (out / f"positions-{c:05d}.parquet").is_file() and \
                (cfg.tree is None or (out / f"nodes-{c:05d}.parquet").is_file()):
            continue
        if stop_after_chunks is not None and written >= stop_after_chunks:
            break
        rid, pos, cols = _capture_chunk(members, prompts, tokenizer, draft, target, cfg,
                                        run["store"], bar)
        if "nodes" in cols:
            from specbatch.traces.format.tree_files import write_nodes

            nodes = cols.pop("nodes")
            write_nodes(out, c, nodes.pop("request_id"), nodes.pop("position"), nodes,
                        cfg.store_dtype)
        write_positions(out, c, rid, pos, cols, cfg.store_dtype)
        for i in members:
            status[i] = STATUS_DONE
        flush_run(out, meta, run)
        written += 1
    bar.close()
    if all(s == STATUS_DONE for s in status):
        read_trace(out)  # the whole trace passes every check of the reader
    return meta


def _drafter_config(cfg: CaptureConfig, draft_path: str) -> CaptureConfig:
    """``cfg`` with the n-gram bounds resolved (vLLM's defaults) for ``--draft ngram``;
    n-gram options with a draft model, and greedy drafting without one, are errors."""
    require(cfg.draft_sample_method in DRAFT_SAMPLE_METHODS,
            f"--draft-sample: expected one of {', '.join(DRAFT_SAMPLE_METHODS)}, got "
            f"{cfg.draft_sample_method!r:.40}")
    if draft_path == NGRAM:
        require(cfg.tree is None, f"--tree: expected a draft model, got --draft {NGRAM}")
        require(cfg.draft_sample_method == PROBABILISTIC,
                f"--draft-sample {cfg.draft_sample_method}: expected only with a draft model, "
                f"got --draft {NGRAM} (its drafts are deterministic already)")
        n_min, n_max = ngram_bounds(cfg.ngram_min, cfg.ngram_max)
        return CaptureConfig(**{**asdict(cfg), "ngram_min": n_min, "ngram_max": n_max})
    require(cfg.ngram_min is None and cfg.ngram_max is None,
            f"--ngram-min/--ngram-max: expected only with --draft {NGRAM}, got --draft "
            f"{draft_path}")
    from specbatch.traces.capture.tree import tree_config

    return tree_config(cfg)


def _check_config(cfg: CaptureConfig, prompts: list[Prompt]) -> None:
    require(cfg.depth >= 1, f"--depth: expected K >= 1, got {cfg.depth}")
    require(cfg.max_new_tokens >= 1, f"--max-new-tokens: expected >= 1, got {cfg.max_new_tokens}")
    require(cfg.temperature >= 0, f"--temperature: expected >= 0, got {cfg.temperature}")
    require(cfg.batch_size >= 1, f"--batch-size: expected >= 1, got {cfg.batch_size}")
    require(bool(prompts), "prompts: expected at least one prompt, got none")


def _capture_meta(cfg: CaptureConfig, tokenizer, draft: tuple, target: tuple, device: str,
                  dtype: str, prompt_source: str | None, command: str | None,
                  extra_meta: dict | None) -> dict:
    """meta.json of a capture: models, tokenizer, seeds, versions, command, zoo provenance, with
    identities and commands free of machine-local paths (:mod:`specbatch.traces.format.identity`).

    draft: ``(drafter, path)``;  target: ``(model, path)``.
    """
    import torch

    (drafter, draft_path), (target_model, target_path) = draft, target
    zoo = None if draft_path == NGRAM else _zoo_provenance(draft_path, target_path)
    command = portable_command(command or sys.argv)
    if zoo is not None:
        extra_meta = {"zoo": zoo, "remake": [zoo["command"], command], **(extra_meta or {})}
    from specbatch.traces.format.trace import default_meta

    settings = asdict(cfg) | {"dtype": dtype, "threads": torch.get_num_threads()}
    shape = cfg.tree_shape()
    if shape is None:
        settings.pop("tree")
        settings.pop("tree_sampling")
    if draft_path == NGRAM:
        settings.pop("draft_sample_method")  # a draft model's option
    elif shape is not None:  # the chain columns: the first path, argmax for top-k trees
        from specbatch.traces.format.trace import TREE_VERSION
        from specbatch.traces.format.tree_nodes import tree_meta

        method = GREEDY if shape.sampling == "topk" else PROBABILISTIC
        extra_meta = {"version": TREE_VERSION, "tree": tree_meta(shape),
                      "draft_sample_method": method, **(extra_meta or {})}
    else:
        extra_meta = {"draft_sample_method": cfg.draft_sample_method, **(extra_meta or {})}
    return default_meta(
        cfg.temperature, cfg.depth,
        models={"draft": drafter.identity(),
                "target": model_identity(target_model, target_path)},
        tokenizer={"class": type(tokenizer).__name__, "vocab": len(tokenizer),
                   "eos_token_id": tokenizer.eos_token_id, "from": "target"},
        prompt_source=prompt_source, seeds={"seed": cfg.seed,
                                            "request_rng": "numpy.random.default_rng([seed, "
                                                           "request_index])"},
        device=device, library_versions=_library_versions(),
        command=command, capture=settings,
        **(extra_meta or {}))


def _capture_chunk(members: list[int], prompts: list[Prompt], tokenizer, draft, target,
                   cfg: CaptureConfig, store: dict, bar) -> tuple:
    """Position rows of the requests ``members``: reference outputs in one batched decode,
    then each request's positions; fills ``store`` with their request rows.

    returns (request ids # [n], positions # [n], the seven list columns # [n, K] each and
    ``proposed`` # [n] for the n-gram drafter)
    """
    import torch

    cols: dict[str, list] = {}
    rid, pos = [], []
    ids_of = {i: encode_prompt(tokenizer, prompts[i].text, cfg.max_prompt_tokens,
                               chat=cfg.chat_template)
              for i in members}
    with torch.inference_mode():
        refs = generate_reference_batch(
            target, [ids_of[i] for i in members],
            [request_uniforms(cfg.seed, i, cfg.max_new_tokens, cfg.depth)[0] for i in members],
            cfg, tokenizer.eos_token_id)
    shape = cfg.tree_shape()
    for i, ref in zip(members, refs):
        if shape is None:
            res = capture_positions(draft, target, ids_of[i], i, cfg, ref)
        else:
            from specbatch.traces.capture.tree import capture_tree_positions, collect_nodes

            res = capture_tree_positions(draft.model, target, ids_of[i], i, cfg, ref, shape)
            collect_nodes(cols, res["nodes"], i)
        n = len(res["y"])
        rid.append(np.full(n, i, dtype=np.int64))
        pos.append(np.arange(n, dtype=np.int64))
        for name in (*LIST_COLUMNS, PROPOSED):
            if name in res:
                cols.setdefault(name, []).append(res[name])
        store[i] = {"prompt_len": len(ids_of[i]), "output_len": n,
                    "category": prompts[i].category}
        bar.update(1)
    out = {k: np.concatenate(v) for k, v in cols.items() if k != "nodes"}
    if "nodes" in cols:
        out["nodes"] = {k: np.concatenate([part[k] for part in cols["nodes"]])
                        for k in cols["nodes"][0]}
    return np.concatenate(rid), np.concatenate(pos), out
