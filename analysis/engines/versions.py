"""Which engine code each emitted setting was checked against.

Each entry names the engine's source the parser twin follows (repository, file, commit) and
the releases that code corresponds to as far as it could be established. Where a release
boundary is known only from a pull request's merge date, the entry says so rather than name a
tag it has not seen.
"""

from __future__ import annotations

#: engine -> what its twin follows.
ENGINE_VERSIONS: dict[str, dict[str, str]] = {
    "vllm": {
        "engine": "vLLM",
        "short": "vLLM main @002e77c1 (config/speculative.py) + @14b450ca (dynamic/utils.py)",
        "checked_against": "vllm-project/vllm main @ 002e77c1f0ef (vllm/config/speculative.py "
                           "SpeculativeConfig: fields, __post_init__, _verify_args) and "
                           "@ 14b450ca590c (vllm/v1/spec_decode/dynamic/utils.py "
                           "validate_and_normalize_dynamic_sd_schedule, 3-item form)",
        "releases": "num_speculative_tokens_per_batch_size since PR #32374 (issue #49548 ran "
                    "it on v0.27.1); rejection_sample_method 'block' present at 002e77c1",
    },
    "vllm-proposal": {
        "engine": "vLLM (not merged)",
        "short": "vLLM RFC #48627 / PR #54801 5-item table @14b450ca (not merged)",
        "checked_against": "the 5-item (bs_lo, bs_hi, ctx_lo, ctx_hi, K) form of "
                           "validate_and_normalize_dynamic_sd_schedule @ 14b450ca590c, the "
                           "per-(batch, context) table of RFC #48627 / PR #54801",
        "releases": "none: not merged; SpeculativeConfig @ 002e77c1 types the field "
                    "list[tuple[int, int, int]]",
    },
    "tensorrt-llm-upper": {
        "engine": "TensorRT-LLM",
        "short": "TensorRT-LLM after PR #10860 (upper-bound keys; #16888 open)",
        "checked_against": "NVIDIA/TensorRT-LLM tensorrt_llm/llmapi/llm_args.py "
                           "DecodingBaseConfig.validate_draft_len_schedule_and_sort (smallest key "
                           "= max_draft_len) and tensorrt_llm/_torch/speculative/utils.py "
                           "get_draft_len_for_batch_size (bisect_left: the first key >= the "
                           "batch size; 0 past the largest key)",
        "releases": "after PR #10860 (merged 2026-03-13; the 1.3.0rc API docs list "
                    "draft_len_schedule); one-model drafters affected by #16888 (open)",
    },
    "tensorrt-llm-lower": {
        "engine": "TensorRT-LLM",
        "short": "TensorRT-LLM PR #8194 until PR #10860 (lower-bound keys)",
        "checked_against": "NVIDIA/TensorRT-LLM tensorrt_llm/llmapi/llm_args.py "
                           "validate_draft_len_schedule_and_sort (key 1 required, schedule[1] = "
                           "max_draft_len) and tensorrt_llm/_torch/speculative/drafter.py "
                           "Drafter.get_draft_len_for_batch_size (bisect_right: the largest "
                           "key <= the batch size)",
        "releases": "from PR #8194 (stage 1, two-model drafters only) until PR #10860",
    },
    "sglang": {
        "engine": "SGLang",
        "short": "SGLang @015c8726 (speculative/adaptive_spec_params.py)",
        "checked_against": "sgl-project/sglang @ 015c872628e3 python/sglang/srt/speculative/"
                           "adaptive_spec_params.py (_load_adaptive_config opens a path; "
                           "adaptive_unsupported_reason: EAGLE/EAGLE3 at topk 1 only; "
                           "AdaptiveStepSlot)",
        "releases": "the adaptive EMA mode (--speculative-adaptive) at that commit",
    },
}


def checked_against(key: str) -> str:
    """One line: the engine code a setting was checked against."""
    v = ENGINE_VERSIONS[key]
    return f"{v['engine']}: {v['checked_against']}; {v['releases']}"


def short(key: str) -> str:
    """The engine version in a few words."""
    return ENGINE_VERSIONS[key]["short"]
