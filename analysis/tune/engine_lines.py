"""Tune's per-engine output: the schedule each engine can take, its complete setting (built
and parser-checked by :mod:`specbatch.analysis.engines`), the fixed-K fallback, and the
simulator fields that apply the setting the way the engine does.

- **vLLM**: the whole ``--speculative-config`` (``method``, ``model``,
  ``num_speculative_tokens``, ``num_speculative_tokens_per_batch_size``).
- **TensorRT-LLM**: ``speculative_config`` in the upper-bound key semantics (releases after PR
  #10860) and, next to it, the lower-bound one (PR #8194 until #10860; two-model drafters
  only). A one-model drafter (``eagle``, ``eagle3``, ``mtp``) never gets a 0 entry (#16888):
  each bucket whose best K is 0 takes its best K >= 1.
- **SGLang**: the adaptive config is a FILE (``OUT/sglang_adaptive.json``) the flags point at,
  only for EAGLE / EAGLE-3 (topk 1) with two candidates per slot; any other draft gets a
  one-line reason and the fixed-K flags.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from specbatch.analysis.engines import sglang, trtllm, vllm
from specbatch.analysis.engines.draft_model import DEFAULT_DRAFT, draft_of, model_id
from specbatch.analysis.engines.versions import checked_against, short
from specbatch.errors import SpecbatchError

ENGINES = ("vllm", "tensorrt-llm", "sglang")
ONE_MODEL_DRAFTS = ("eagle", "eagle3", "mtp")
__all__ = ["draft_of", "model_id", "engine_ranges", "settings", "fixed_line", "sglang_fields"]


def merge(ranges: Iterable[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
    """Adjacent (lo, hi, K) ranges with the same K joined."""
    out: list[tuple[int, int, int]] = []
    for lo, hi, k in ranges:
        if out and out[-1][2] == k:
            out[-1] = (out[-1][0], hi, k)
        else:
            out.append((lo, hi, k))
    return out


def _best(by_k: dict[int, float]) -> int:
    return max(by_k, key=lambda k: (by_k[k], -k))


def engine_ranges(chosen: list[dict], draft: str = DEFAULT_DRAFT
                  ) -> dict[str, list[tuple[int, int, int]]]:
    """Each engine's schedule within its rules. vLLM and SGLang take any K per range.
    TensorRT-LLM: the smallest key's length is ``max_draft_len`` and none is larger
    (``validate_draft_len_schedule_and_sort``), so the first bucket keeps its K and every later
    one takes its best K at most that; for a one-model drafter, at least 1 (#16888)."""
    free = merge((b["lo"], b["hi"], b["k"]) for b in chosen)
    floor = 1 if draft.lower() in ONE_MODEL_DRAFTS else 0
    first_by_k = {int(k): v for k, v in chosen[0]["throughput"].items() if int(k) >= floor}
    first = chosen[0]["k"] if chosen[0]["k"] >= floor or not first_by_k else _best(first_by_k)
    capped = []
    for b in chosen:
        if not b.get("reached", True) and capped:  # nothing measured there: the last K reached
            capped.append((b["lo"], b["hi"], capped[-1][2]))
            continue
        by_k = {int(k): v for k, v in b["throughput"].items() if floor <= int(k) <= first}
        capped.append((b["lo"], b["hi"], _best(by_k) if by_k else first))
    return {"vllm": free, "tensorrt-llm": merge(capped), "sglang": free}


def top_k(ranges: list[tuple[int, int, int]]) -> int:
    return max(1, max(k for *_, k in ranges))


def settings(ranges: dict[str, list[tuple[int, int, int]]], chosen: list[dict], base: dict,
             out: Path | None) -> dict[str, dict]:
    """Each engine's emitted setting (``setting``: the line, None where none applies, with
    ``reason``), its config object, and the engine code it was checked against."""
    draft, model = draft_of(base), model_id(base)
    out_file = (out / sglang.FILE_NAME) if out is not None else Path(sglang.FILE_NAME)
    v = vllm.speculative_config(draft=draft, model=model, ranges=ranges["vllm"])
    trt = ranges["tensorrt-llm"]
    upper = trtllm.speculative_config(draft=draft, model=model, ranges=trt, semantics="upper")
    try:
        lower = trtllm.line(trtllm.speculative_config(draft=draft, model=model, ranges=trt,
                                                      semantics="lower"))
    except SpecbatchError as exc:
        lower = f"none: {exc}"
    result = {
        "vllm": {"setting": vllm.flag(v), "config": v, "checked_against": checked_against("vllm"),
                 "version": short("vllm")},
        "tensorrt-llm": {"setting": trtllm.line(upper), "config": upper,
                         "lower_bound_release": lower,
                         "version": short("tensorrt-llm-upper") + "; lower-bound form: "
                         + short("tensorrt-llm-lower"),
                         "checked_against": checked_against("tensorrt-llm-upper")
                         + " | lower: " + checked_against("tensorrt-llm-lower")},
    }
    reason = sglang.unsupported_reason(draft)
    if reason is not None:
        result["sglang"] = {"setting": None, "reason": reason, "config": None,
                            "checked_against": checked_against("sglang"),
                            "version": short("sglang")}
    else:
        cfg = sglang.slots(chosen, ranges["sglang"])
        result["sglang"] = {
            "setting": sglang.flags(draft=draft, model=model, steps=top_k(ranges["sglang"]),
                                    config_path=out_file),
            "config": cfg, "file": str(out_file), "checked_against": checked_against("sglang"),
            "version": short("sglang")}
    return result


def fixed_line(engine: str, k: int, base: dict, max_num_seqs: int) -> str:
    """The complete fixed-K setting (K = 0: speculation off)."""
    if k == 0:
        return "no speculative decoding (a fixed K = 0 wins)"
    draft, model = draft_of(base), model_id(base)
    if engine == "vllm":
        return vllm.flag(vllm.speculative_config(draft=draft, model=model, k=k))
    if engine == "tensorrt-llm":
        return trtllm.line(trtllm.speculative_config(draft=draft, model=model,
                                                     ranges=[(1, max_num_seqs, k)]))
    line = sglang.flags(draft=draft, model=model, steps=k, config_path=None)
    reason = sglang.unsupported_reason(draft)
    return f"{line} (no adaptive mode: {reason})" if reason else line


def sglang_fields(setting: dict) -> dict:
    """The simulator fields of SGLang's emitted adaptive config (``ema-adaptive``)."""
    steps = max(max(s["candidate_steps"]) for s in setting["config"].values())
    return {"policy": "ema-adaptive", "num_speculative_tokens": max(1, steps),
            "speculative_adaptive_config": json.dumps(setting["config"])}
