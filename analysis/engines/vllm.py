"""vLLM's ``--speculative-config``: the whole JSON, and its parser twin.

**Emit** (:func:`speculative_config`): ``method`` (vLLM's ``SpeculativeMethod`` name of the
drafter: ``draft_model``, ``ngram``, ``eagle``, ``eagle3``, ``mtp``), ``model`` (the draft's
Hugging Face id or path; a head drafter's checkpoint; absent for ``mtp``, which loads the
target's own MTP layers, and ``ngram``), ``num_speculative_tokens`` (the largest K),
``num_speculative_tokens_per_batch_size`` (the schedule, inclusive ``[lo, hi, K]`` ranges) when
the schedule has more than one range, and ``rejection_sample_method: "block"`` when the
answer verifies by block verification (vLLM's default ``"standard"`` is token verification).

**Twin** (:func:`check_speculative_config`): follows ``SpeculativeConfig`` at
vllm-project/vllm@002e77c1f0ef (vllm/config/speculative.py):

- the field types (``num_speculative_tokens: int``, ``gt=0``; ``method`` one of
  ``SpeculativeMethod``; ``rejection_sample_method`` one of ``"standard"``, ``"synthetic"``,
  ``"block"``; ``draft_tensor_parallel_size >= 1``; ``prompt_lookup_min/max >= 1``;
  ``num_speculative_tokens_per_batch_size: list[tuple[int, int, int]] | None``);
- ``__post_init__``: ``method`` None becomes ``draft_model`` (``ngram`` when ``model`` is
  "ngram"); ``model`` None with ``num_speculative_tokens`` set is allowed only for ``mtp``,
  ``dspark``, ``ngram``, ``ngram_gpu``, ``suffix``, ``extract_hidden_states`` (else
  "num_speculative_tokens was provided but without speculative model"); ``prompt_lookup_min <=
  prompt_lookup_max``; the legacy MTP method names become ``mtp``;
- ``_verify_args``: ``tensor_parallel_size`` refused; ``synthetic`` needs exactly one of
  ``synthetic_acceptance_rates`` / ``synthetic_acceptance_length``, and both are refused
  otherwise;
- the schedule through ``validate_and_normalize_dynamic_sd_schedule`` (3-item form; @14b450ca
  vllm/v1/spec_decode/dynamic/utils.py): positive ranges, ``lo <= hi``, sorted and
  non-overlapping, the first at 1, K >= 0.

The twin is stricter than vLLM in one way: a key that is not a ``SpeculativeConfig`` field
named here is refused (tune and plan never write one), and it checks nothing that needs the
model files (vocabulary sizes, ``n_predict`` divisibility).

The per-(batch, context) table of vLLM's open proposals (RFC #48627, PR #54801; 5-item
``(bs_lo, bs_hi, ctx_lo, ctx_hi, K)`` entries) is checked by :func:`check_proposal_table`
(the 5-item rules @14b450ca) and is never part of a merged-vLLM line: the merged field takes
3-item entries only.
"""

from __future__ import annotations

import json
from typing import Any

from specbatch.analysis.engines.twin_input import json_object, twin_fail

WHERE = "vllm --speculative-config"
#: vLLM's SpeculativeMethod literal @002e77c1 (the MTP model types fold into "mtp").
MTP_TYPES = ("deepseek_mtp", "mimo_mtp", "glm4_moe_mtp", "ernie_mtp", "qwen3_next_mtp",
             "longcat_flash_mtp", "mtp")
METHODS = ("ngram", "medusa", "mlp_speculator", "draft_model", "suffix", "custom_class",
           "eagle", "eagle3", "extract_hidden_states", "dflash", "ngram_gpu", "dspark",
           *MTP_TYPES)
#: Methods that need no ``model`` (``__post_init__`` fills it in).
MODEL_FREE = ("mtp", "dspark", "ngram", "ngram_gpu", "suffix", "extract_hidden_states")
REJECTION_METHODS = ("standard", "synthetic", "block")
#: The SpeculativeConfig fields the twin knows (@002e77c1), with their JSON kinds.
FIELDS: dict[str, tuple[type, ...]] = {
    "method": (str,), "model": (str,), "num_speculative_tokens": (int,),
    "draft_tensor_parallel_size": (int,), "tensor_parallel_size": (int,),
    "quantization": (str,), "max_model_len": (int,), "revision": (str,),
    "code_revision": (str,), "disable_padded_drafter_batch": (bool,),
    "prompt_lookup_max": (int,), "prompt_lookup_min": (int,), "parallel_drafting": (bool,),
    "num_speculative_tokens_per_batch_size": (list,), "rejection_sample_method": (str,),
    "synthetic_acceptance_rates": (list,), "synthetic_acceptance_length": (int, float),
    "draft_sample_method": (str,), "enforce_eager": (bool,),
}


def _fail(field: str, expected: str, got: Any) -> None:
    twin_fail(WHERE, field, expected, got)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def method_of(draft: str) -> str:
    """vLLM's ``method`` for a specbatch draft name."""
    d = str(draft).lower()
    return d if d in ("eagle", "eagle3", "mtp", "ngram") else "draft_model"


def speculative_config(*, draft: str, model: str | None,
                       ranges: list[tuple[int, int, int]] | None = None, k: int | None = None,
                       verify: str = "token") -> dict:
    """The whole ``--speculative-config`` object (module docstring). ``ranges``: a schedule
    (one range, or none: fixed ``k``)."""
    method = method_of(draft)
    top = k if ranges is None else max(1, max(r[2] for r in ranges))
    out: dict[str, Any] = {"method": method}
    if method not in MODEL_FREE:
        out["model"] = model
    out["num_speculative_tokens"] = int(top)
    if ranges is not None and len(ranges) > 1:
        out["num_speculative_tokens_per_batch_size"] = [list(map(int, r)) for r in ranges]
    if verify == "block":
        out["rejection_sample_method"] = "block"
    check_speculative_config(out)
    return out


def flag(config: dict) -> str:
    """The command-line spelling."""
    return f"--speculative-config '{json.dumps(config)}'"


def check_speculative_config(config: dict | str) -> dict:
    """The twin (module docstring): the config as vLLM resolves it (``method`` and ``model``
    filled in), or a one-line :class:`SpecbatchError` naming the field."""
    config = json_object(config, WHERE)
    out = dict(config)
    for key, value in out.items():
        if key not in FIELDS:
            _fail(key, f"a SpeculativeConfig field ({', '.join(sorted(FIELDS))})", key)
        kinds = FIELDS[key]
        if value is not None and (not isinstance(value, kinds)
                                  or (int in kinds and bool not in kinds
                                      and isinstance(value, bool))):
            _fail(key, " or ".join(k.__name__ for k in kinds), value)
    if out.get("tensor_parallel_size") is not None:
        _fail("tensor_parallel_size", "draft_tensor_parallel_size (not a valid argument)",
              out["tensor_parallel_size"])
    method, model = out.get("method"), out.get("model")
    if method is not None and method not in METHODS:
        _fail("method", f"one of {', '.join(METHODS)}", method)
    if method is None:
        method = "ngram" if model in ("ngram", "[ngram]") else "draft_model"
    if method in MTP_TYPES:
        method = "mtp"
    n = out.get("num_speculative_tokens")
    if n is None or n <= 0:
        _fail("num_speculative_tokens", "an integer > 0", n)
    if model is None and method not in MODEL_FREE:
        _fail("model", f"a draft model for method {method} (num_speculative_tokens was "
                       "provided but without speculative model)", model)
    if method in ("ngram", "ngram_gpu"):
        lo, hi = out.get("prompt_lookup_min"), out.get("prompt_lookup_max")
        lo, hi = (5, 5) if lo is None and hi is None else (lo or hi, hi or lo)
        if lo < 1 or hi < 1 or lo > hi:
            _fail("prompt_lookup_min", f"1 <= prompt_lookup_min <= prompt_lookup_max ({hi})", lo)
        out["prompt_lookup_min"], out["prompt_lookup_max"] = lo, hi
    tp = out.get("draft_tensor_parallel_size")
    if tp is not None and tp < 1:
        _fail("draft_tensor_parallel_size", "an integer >= 1", tp)
    rejection = out.get("rejection_sample_method", "standard")
    if rejection not in REJECTION_METHODS:
        _fail("rejection_sample_method", f"one of {', '.join(REJECTION_METHODS)}", rejection)
    synthetic = [out.get("synthetic_acceptance_rates"), out.get("synthetic_acceptance_length")]
    if rejection == "synthetic" and sum(v is not None for v in synthetic) != 1:
        _fail("rejection_sample_method", "exactly one of synthetic_acceptance_rates or "
              "synthetic_acceptance_length with 'synthetic'", rejection)
    if rejection != "synthetic" and any(v is not None for v in synthetic):
        _fail("synthetic_acceptance_rates", "none unless rejection_sample_method is "
              "'synthetic'", synthetic)
    schedule = out.get("num_speculative_tokens_per_batch_size")
    if schedule is not None:
        out["num_speculative_tokens_per_batch_size"] = check_schedule(schedule, arity=(3,))
    out["method"], out["model"] = method, model
    out["rejection_sample_method"] = rejection
    return out


def check_schedule(schedule: Any, arity: tuple[int, ...] = (3,)) -> list[tuple[int, ...]]:
    """``validate_and_normalize_dynamic_sd_schedule`` (@14b450ca): ``arity`` (3,) is the
    merged field, (5,) the unmerged per-(batch, context) proposal. Entries are returned as
    given (3-item) or normalised with the last context range open (5-item)."""
    name = "num_speculative_tokens_per_batch_size"
    if not isinstance(schedule, list) or not schedule:
        _fail(name, "a non-empty list of [lo, hi, K] entries", schedule)
    parsed = []
    for entry in schedule:
        if (not isinstance(entry, (list, tuple)) or len(entry) not in arity
                or not all(_is_int(v) for v in entry)):
            _fail(name, f"{' or '.join(map(str, arity))}-item integer entries", entry)
        bs_lo, bs_hi, *rest = entry
        ctx_lo, ctx_hi, k = (1, 2**31 - 1, rest[0]) if len(entry) == 3 else rest
        if bs_lo <= 0 or bs_hi <= 0 or bs_lo > bs_hi:
            _fail(name, "positive batch-size ranges with lo <= hi", entry)
        if ctx_lo <= 0 or ctx_hi <= 0 or ctx_lo > ctx_hi:
            _fail(name, "positive context ranges with lo <= hi", entry)
        if k < 0:
            _fail(name, "K >= 0", entry)
        parsed.append((bs_lo, bs_hi, ctx_lo, ctx_hi, k))
    bs_ranges = sorted({(a, b) for a, b, *_ in parsed})
    end = 0
    for lo, hi in bs_ranges:
        if lo <= end:
            _fail(name, "non-overlapping, sorted batch-size ranges", schedule)
        end = hi
    if bs_ranges[0][0] != 1:
        _fail(name, "a first batch-size range starting at 1", schedule)
    ctx_ranges = sorted({(c, d) for _, _, c, d, _ in parsed})
    if len(parsed) != len(bs_ranges) * len(ctx_ranges):
        _fail(name, "a rectangular (batch size x context) grid", schedule)
    if ctx_ranges[0][0] != 1 or any(ctx_ranges[i][0] != ctx_ranges[i - 1][1] + 1
                                    for i in range(1, len(ctx_ranges))):
        _fail(name, "contiguous context ranges from 1", schedule)
    if len({(a, b, c) for a, b, c, _, _ in parsed}) != len(parsed):
        _fail(name, "no duplicate cell", schedule)
    if arity == (3,):
        return [tuple(e) for e in schedule]
    last = ctx_ranges[-1][0]
    return sorted(((a, b, c, 2**31 - 1 if c == last else d, k) for a, b, c, d, k in parsed),
                  key=lambda e: (e[0], e[2]))


def check_proposal_table(table: Any) -> list[tuple[int, ...]]:
    """The unmerged per-(batch, context) table (RFC #48627 / PR #54801), 5-item entries."""
    return check_schedule(table, arity=(5,))
