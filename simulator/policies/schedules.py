"""The engines' draft-length tables, parsed from their own knob spellings and validated.

- vLLM ``num_speculative_tokens_per_batch_size`` (PR vllm-project/vllm#32374, "[V1][Spec
  Decode] Add Dynamic SD"): inclusive batch-size ranges ``[(lo, hi, K)]``, written here
  ``"1-16:3,64-128:2,256-4096:0"`` (the PR's ``{"1-16": 3, ...}``) or as vLLM's JSON list
  ``"[[1, 16, 3], [64, 128, 2]]"``. Checks and expansion follow
  ``vllm/v1/spec_decode/dynamic/utils.py`` (``validate_and_normalize_dynamic_sd_schedule``,
  ``build_dynamic_sd_schedule_lookup``, 3-item form): ranges positive, ``lo <= hi``, sorted
  and non-overlapping, the first starting at 1, K >= 0; a gap between ranges and everything
  past the last range inherit the previous K; every K is clamped to
  ``num_speculative_tokens``.
- TensorRT-LLM ``draft_len_schedule`` (``tensorrt_llm/llmapi/llm_args.py``
  ``DecodingBaseConfig``; lookup ``tensorrt_llm/_torch/speculative/utils.py``
  ``get_draft_len_for_batch_size``): ``{batch size: draft_len}``, written ``"4:4,8:2,32:1"`` or
  as JSON ``'{"4": 4, "8": 2}'``. A key is the largest batch size its draft length serves (the
  first key >= the batch size wins, ``bisect_left``); batch sizes past the largest key draft 0.
- SGLang ``--speculative-adaptive-config`` (``python/sglang/srt/speculative/
  adaptive_spec_params.py``, ``_load_adaptive_config``): a JSON object of batch-size slots
  ``{"1": {"candidate_steps": [1, 3, 5, 7], ...}, "8": {...}}`` whose other keys (``ema_alpha``,
  ``update_interval``, ``warmup_batches``, ``up_hysteresis``, ``down_hysteresis``,
  ``ceiling_coeff``) apply to every slot unless a slot sets its own. None: SGLang's
  ``DEFAULT_ADAPTIVE_CONFIG``.

Every failure is one line, ``WHERE: field NAME: expected ..., got ...``.
"""

from __future__ import annotations

import bisect
import json
import math
import re

import numpy as np

from specbatch.fields import fail

#: SGLang's DEFAULT_ADAPTIVE_CONFIG (adaptive_spec_params.py), used when no config is given.
SGLANG_DEFAULT = {
    "1": {"candidate_steps": [1, 3, 5, 7], "up_hysteresis": 0.0, "down_hysteresis": -0.25,
          "ceiling_coeff": 0},
    "8": {"candidate_steps": [0, 1, 3], "up_hysteresis": 0.0, "down_hysteresis": 0.0,
          "ceiling_coeff": 0},
    "32": {"candidate_steps": [0, 1], "up_hysteresis": 0.0, "down_hysteresis": 0.0,
           "ceiling_coeff": 0},
    "64": {"candidate_steps": [0], "up_hysteresis": 0.0, "down_hysteresis": 0.0,
           "ceiling_coeff": 0},
}
#: AdaptiveStepSlot's defaults for the keys a slot may omit.
SGLANG_SLOT_DEFAULTS = {"ema_alpha": 0.2, "update_interval": 5, "warmup_batches": 10,
                        "down_hysteresis": -0.25, "up_hysteresis": 0.0, "ceiling_coeff": 0}

_RANGE = re.compile(r"^\s*(\d+)\s*-\s*(\d+)\s*:\s*(\d+)\s*$")
_PAIR = re.compile(r"^\s*(\d+)\s*:\s*(\d+)\s*$")


def parse_vllm_table(text: str, where: str, name: str) -> list[tuple[int, int, int]]:
    """vLLM's ``[(lo, hi, K)]`` from ``"lo-hi:K,..."`` or a JSON list of triples, validated."""
    expected = "ranges 'lo-hi:K, ...' (or [[lo, hi, K], ...]) starting at 1, sorted, " \
               "non-overlapping, lo <= hi, K >= 0"
    entries: list[tuple[int, int, int]] = []
    if text.strip().startswith("["):
        try:
            raw = json.loads(text, parse_constant=_refuse_constant)
            ok = all(isinstance(v, int) and not isinstance(v, bool) for e in raw for v in e)
            entries = [(int(a), int(b), int(k)) for a, b, k in raw] if ok else []
        except (ValueError, TypeError, OverflowError, RecursionError):  # nested too deep
            ok = False
    else:
        matches = [_RANGE.match(part) for part in text.split(",")]
        ok = all(matches)
        if ok:
            entries = [(int(m.group(1)), int(m.group(2)), int(m.group(3))) for m in matches]
    if not ok or not entries:
        fail(where, name, expected, text)
    previous_end = 0
    for lo, hi, k in sorted(entries):
        if lo < 1 or lo > hi or k < 0 or lo <= previous_end:
            fail(where, name, expected, text)
        previous_end = hi
    if min(entries)[0] != 1:
        fail(where, name, expected, text)
    return sorted(entries)


def vllm_lookup(entries: list[tuple[int, int, int]], max_batch: int, k_max: int) -> np.ndarray:
    """The dense batch size -> K table of ``build_dynamic_sd_schedule_lookup`` (3-item form):
    index b is the K of a batch of b requests (index 0 unused), gaps and the tail inheriting
    the previous range's K, every K clamped to ``k_max``.  returns # [max_batch + 1] int64"""
    dense = np.zeros(max_batch + 1, dtype=np.int64)
    next_bs, last_k = 1, None
    for lo, hi, k in entries:
        if lo > next_bs and last_k is not None:
            dense[next_bs:min(lo, max_batch + 1)] = min(k_max, last_k)
        dense[max(lo, next_bs):min(hi, max_batch) + 1] = min(k_max, k)
        next_bs, last_k = max(next_bs, hi + 1), k
        if next_bs > max_batch:
            break
    if last_k is not None and next_bs <= max_batch:
        dense[next_bs:] = min(k_max, last_k)
    return dense


def parse_trt_schedule(text: str, where: str, name: str, k_max: int) -> dict[int, int]:
    """TensorRT-LLM's ``{batch size: draft_len}`` from ``"bs:K,..."``, a JSON object
    (``'{"4": 4, "8": 2}'``) or the dict as TensorRT-LLM's own docs and YAML options write it,
    integer keys unquoted (``"{4: 4, 8: 2}"``, ``DecodingBaseConfig.draft_len_schedule:
    dict[int, int]``), sorted by key; keys >= 1, each draft length in 0..k_max
    (``max_draft_len``; ``validate_draft_len_schedule_and_sort`` in
    ``tensorrt_llm/llmapi/llm_args.py``)."""
    expected = f"pairs 'batch_size:draft_len, ...' (or {{4: 4, 8: 2}}) with batch sizes >= 1 " \
               f"and draft lengths in 0..{k_max} (num_speculative_tokens)"
    pairs: list[tuple[int, int]] = []
    body = text.strip()
    ok = False
    if body.startswith("{"):
        try:
            raw = json.loads(text, parse_constant=_refuse_constant)
            ok = isinstance(raw, dict) and all(isinstance(v, int) and not isinstance(v, bool)
                                               for v in raw.values())
            pairs = [(int(key), int(v)) for key, v in raw.items()] if ok else []
        except (ValueError, TypeError, AttributeError, OverflowError, RecursionError):
            ok = False
        if not ok and body.endswith("}"):  # the YAML / Python spelling: keys unquoted
            body = body[1:-1]
    if not ok:
        matches = [_PAIR.match(part) for part in body.split(",")]
        ok = all(matches)
        if ok:
            pairs = [(int(m.group(1)), int(m.group(2))) for m in matches]  # type: ignore[union-attr]
    keys = [key for key, _ in pairs]
    if (not ok or not pairs or len(set(keys)) != len(keys)
            or any(key < 1 or not 0 <= v <= k_max for key, v in pairs)):
        fail(where, name, expected, text)
    return dict(sorted(pairs))


def _refuse_constant(word: str) -> float:
    """``json.loads``'s hook for NaN and ±Infinity, which are not JSON: refused."""
    raise ValueError(f"{word} is not a JSON number")


def trt_draft_len(schedule: dict[int, int], batch_size: int) -> int:
    """``get_draft_len_for_batch_size``: the draft length of the first key >= ``batch_size``;
    0 (speculation off) past the largest key."""
    keys = list(schedule)
    i = bisect.bisect_left(keys, batch_size)
    return schedule[keys[i]] if i < len(keys) else 0


def parse_sglang_config(text: str | None, where: str, name: str) -> dict[int, dict]:
    """SGLang's adaptive config as ``{slot batch size: settings}``, each slot's settings the
    global keys overlaid with its own (``{**cfg, **entry}``) and AdaptiveStepSlot's defaults
    for the rest; ``candidate_steps`` a non-empty list of non-negative integers."""
    expected = ('a JSON object of batch-size slots, e.g. {"1": {"candidate_steps": [1, 3]}}, '
                "each with a non-empty candidate_steps list of integers >= 0")
    if text is None:
        cfg = SGLANG_DEFAULT
    else:
        try:
            cfg = json.loads(text, parse_constant=_refuse_constant)
        except (ValueError, RecursionError):
            fail(where, name, expected, text)
        if not isinstance(cfg, dict):
            fail(where, name, expected, text)
    for key in cfg:  # "²" and "٣" are str.isdigit() too, and int() refuses "²"
        if key.isdigit() and not key.isascii():
            fail(where, name, "batch-size slot keys written with the digits 0-9", key)
    shared = {key: value for key, value in cfg.items() if not key.isdigit()}
    slots: dict[int, dict] = {}
    for key, entry in cfg.items():
        if not key.isdigit():
            continue
        settings = {**SGLANG_SLOT_DEFAULTS, **shared, **(entry if isinstance(entry, dict) else {})}
        steps = settings.get("candidate_steps")
        if (not isinstance(entry, dict) or not isinstance(steps, list) or not steps
                or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0
                           for s in steps)):
            fail(where, name, expected, text)
        for number in ("ema_alpha", "up_hysteresis", "down_hysteresis", "ceiling_coeff"):
            value = settings[number]
            if (not isinstance(value, (int, float)) or isinstance(value, bool)
                    or not math.isfinite(value)):
                fail(where, name, f"{number} a finite number", value)
        if not 0 < settings["ema_alpha"] <= 1:  # the EMA's weight: outside it diverges
            fail(where, name, "ema_alpha in (0, 1] (the weight of the newest batch)",
                 settings["ema_alpha"])
        if settings["ceiling_coeff"] < 0:
            fail(where, name, "ceiling_coeff >= 0 (0: no ceiling)", settings["ceiling_coeff"])
        for count in ("update_interval", "warmup_batches"):
            value = settings[count]
            low = 1 if count == "update_interval" else 0
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                fail(where, name, f"{count} a non-negative integer (update_interval >= 1)", value)
        slots[int(key)] = settings
    if not slots:
        fail(where, name, expected, text)
    return dict(sorted(slots.items()))
