"""TensorRT-LLM's ``speculative_config`` with ``draft_len_schedule``, in either key semantics,
and its parser twin.

Two releases read the schedule's keys differently (analysis.engines.versions):

- **upper** (after PR #10860): a key is the *largest* batch size its draft length serves:
  ``get_draft_len_for_batch_size`` in tensorrt_llm/_torch/speculative/utils.py takes the first
  key >= the batch size (``bisect_left``), and a batch past the largest key drafts 0;
  ``validate_draft_len_schedule_and_sort`` (tensorrt_llm/llmapi/llm_args.py) requires the
  smallest key's length to equal ``max_draft_len``.
- **lower** (PR #8194 until PR #10860): a key is the *smallest* batch size its length serves:
  ``Drafter.get_draft_len_for_batch_size`` (tensorrt_llm/_torch/speculative/drafter.py) takes
  the largest key <= the batch size (``bisect_right``); key 1 is required and
  ``schedule[1]`` must equal ``max_draft_len``. Only two-model drafters (``Draft_Target``)
  read it there: the one-model path (EAGLE-3 one-model, MTP) gained dynamic draft length in
  PR #10860.

In both, keys >= 1, lengths >= 0 and <= ``max_draft_len``. The same ranges ``[(lo, hi, K)]``
(first ``lo`` = 1) are written ``{hi: K}`` (upper) or ``{lo: K}`` (lower); both resolve every
batch size 1..max_num_seqs to the same K (tests/analysis/engines pin it by enumeration).

**TensorRT-LLM #16888** (PR "Keep drafting alive when dynamic draft length hits its floor",
open): one-model drafters keep cross-iteration state (draft KV, MTP hidden-state pools) that
only a draft forward refreshes; a schedule that resolves to 0 skips it, and when speculation
resumes the drafter reads rows never written: acceptance collapses silently. So for one-model
drafters under the upper semantics the twin refuses an entry of 0 (and the emitter floors
each range at K = 1, as the PR's fix does), and the largest key must cover ``max_batch_size``
(past it the schedule resolves to 0 too).
"""

from __future__ import annotations

import bisect
import json
from typing import Any

from specbatch.analysis.engines.twin_input import json_object, twin_fail

WHERE = "tensorrt-llm speculative_config"
SEMANTICS = ("upper", "lower")
#: specbatch draft -> TensorRT-LLM decoding_type (llm_args.py's DecodingConfig classes).
DECODING_TYPES = {"eagle3": "Eagle3", "eagle": "Eagle", "mtp": "MTP", "ngram": "NGram"}
#: decoding types that need ``speculative_model`` (validate_speculative_model and friends).
NEEDS_MODEL = ("Eagle", "Eagle3", "Draft_Target")
#: one-model drafters: the draft runs inside the target's engine (#16888 applies).
ONE_MODEL = ("Eagle3", "Eagle", "MTP")


def _fail(field: str, expected: str, got: Any) -> None:
    twin_fail(WHERE, field, expected, got)


def decoding_type(draft: str) -> str:
    return DECODING_TYPES.get(str(draft).lower(), "Draft_Target")


def schedule_keys(ranges: list[tuple[int, int, int]], semantics: str) -> dict[int, int]:
    """``{hi: K}`` (upper) or ``{lo: K}`` (lower) from inclusive ranges starting at 1."""
    if semantics not in SEMANTICS:
        _fail("semantics", "upper or lower", semantics)
    return {int(hi if semantics == "upper" else lo): int(k) for lo, hi, k in ranges}


def draft_len(schedule: dict[int, int], batch_size: int, semantics: str) -> int:
    """The draft length the engine applies at ``batch_size`` (module docstring)."""
    keys = sorted(schedule)
    if semantics == "upper":
        i = bisect.bisect_left(keys, batch_size)
        return schedule[keys[i]] if i < len(keys) else 0
    i = bisect.bisect_right(keys, batch_size)
    return schedule[keys[i - 1]] if i else 0


def floor_one_model(ranges: list[tuple[int, int, int]],
                    best_positive: dict[tuple[int, int], int]) -> list[tuple[int, int, int]]:
    """#16888: every range of K = 0 takes its bucket's best K >= 1 (``best_positive`` by
    (lo, hi)), adjacent equal ranges merged."""
    out: list[tuple[int, int, int]] = []
    for lo, hi, k in ranges:
        k = k if k > 0 else best_positive[(lo, hi)]
        if out and out[-1][2] == k:
            out[-1] = (out[-1][0], hi, k)
        else:
            out.append((lo, hi, k))
    return out


def speculative_config(*, draft: str, model: str | None, ranges: list[tuple[int, int, int]],
                       semantics: str = "upper") -> dict:
    """The ``speculative_config`` object: ``decoding_type``, ``max_draft_len`` (the first
    range's K), ``speculative_model`` where the type needs one, ``draft_len_schedule`` when
    there is more than one range; checked by the twin before it is returned."""
    dtype = decoding_type(draft)
    out: dict[str, Any] = {"decoding_type": dtype, "max_draft_len": int(ranges[0][2])}
    if dtype in NEEDS_MODEL:
        out["speculative_model"] = model
    if dtype == "MTP":  # the MTP config's own draft length (llm_args.py MTPDecodingConfig);
        out["num_nextn_predict_layers"] = int(ranges[0][2])  # equal to max_draft_len
    if len(ranges) > 1:
        out["draft_len_schedule"] = {str(k): v for k, v in schedule_keys(ranges, semantics).items()}
    check_speculative_config(out, semantics=semantics,
                             max_batch_size=max(hi for _, hi, _ in ranges))
    return out


def line(config: dict) -> str:
    """The LLM-API YAML line (``--extra_llm_api_options`` / ``--config`` files take it)."""
    return "speculative_config: " + json.dumps(config)


def check_speculative_config(config: dict | str, *, semantics: str,
                             max_batch_size: int | None = None) -> dict:
    """The twin: ``config`` with its schedule as ``{int key: draft_len}`` sorted, or a
    one-line :class:`SpecbatchError` naming the field."""
    config = json_object(config, WHERE)
    if semantics not in SEMANTICS:
        _fail("semantics", "upper or lower", semantics)
    out = dict(config)
    dtype = out.get("decoding_type")
    if dtype not in (*DECODING_TYPES.values(), "Draft_Target"):
        _fail("decoding_type", "Eagle3, Eagle, MTP, NGram or Draft_Target", dtype)
    top = out.get("max_draft_len")
    if not isinstance(top, int) or isinstance(top, bool) or top < 0:
        _fail("max_draft_len", "an integer >= 0", top)
    if dtype in ("Eagle", "Eagle3") and top == 0:
        _fail("max_draft_len", "> 0 for Eagle", top)
    if dtype in NEEDS_MODEL and not out.get("speculative_model"):
        _fail("speculative_model", f"the draft model for {dtype}", out.get("speculative_model"))
    raw = out.get("draft_len_schedule")
    if raw is None:
        return out
    if not isinstance(raw, dict) or not raw:
        _fail("draft_len_schedule", "a non-empty {batch_size: draft_len} object", raw)
    schedule: dict[int, int] = {}
    for key, value in raw.items():
        try:  # pydantic's lax mode: dict[int, int] keys from JSON strings
            k = int(key)
        except (TypeError, ValueError):
            _fail("draft_len_schedule", "integer batch-size keys", key)
        if not isinstance(value, int) or isinstance(value, bool):
            _fail("draft_len_schedule", "integer draft lengths", value)
        if k < 1:
            _fail("draft_len_schedule", "batch size threshold >= 1", k)
        if value < 0:
            _fail("draft_len_schedule", "draft length >= 0", value)
        if value > top:
            _fail("draft_len_schedule", f"every draft length <= max_draft_len ({top})", value)
        schedule[k] = value
    schedule = dict(sorted(schedule.items()))
    if semantics == "lower":
        if 1 not in schedule:
            _fail("draft_len_schedule", "key 1 (must include batch_size=1)", raw)
        if dtype in ONE_MODEL:
            _fail("draft_len_schedule", f"a two-model drafter (the one-model {dtype} path "
                  "reads no schedule before PR #10860)", dtype)
    smallest = min(schedule)
    if schedule[smallest] != top:
        _fail("draft_len_schedule", f"schedule[{smallest}] = max_draft_len ({top})",
              schedule[smallest])
    if semantics == "upper" and dtype in ONE_MODEL:
        zeros = [k for k, v in schedule.items() if v == 0]
        if zeros:
            _fail("draft_len_schedule", f"no draft length 0 for the one-model {dtype} drafter "
                  "(TensorRT-LLM #16888: drafter state goes stale, acceptance collapses)",
                  zeros)
        if max_batch_size is not None and max(schedule) < max_batch_size:
            _fail("draft_len_schedule", f"a largest key >= max_batch_size ({max_batch_size}): "
                  "past it the schedule resolves to 0 (#16888)", max(schedule))
    out["draft_len_schedule"] = schedule
    return out
