"""The engine settings that run the plan's answer: the same builders and parser twins as
``tune`` (analysis.engines), for the chosen policy, K and verification rule.

- ``ar``: no ``--speculative-config`` (every engine).
- vLLM's ``--quantization`` / ``--kv-cache-dtype`` when the plan set them, and
  ``--async-scheduling`` / ``--no-async-scheduling`` when it set ``async_scheduling`` (true
  or false; "auto" is vLLM's default, no flag; a true dropped for the n-gram drafter gives no
  flag, which vLLM would refuse).
- ``fixed`` K: vLLM's whole ``--speculative-config`` with ``rejection_sample_method:
  "block"`` when the answer verifies by block verification (vLLM's ``"standard"`` is token
  verification); TensorRT-LLM's ``speculative_config`` (its samplers verify token by token: a
  block-verification answer has no TensorRT-LLM line, and says so); SGLang's fixed-K flags
  (token verification likewise).
- ``tetris``, ``dsd``: no engine implements them; the line says so and names the engines'
  nearest setting, fixed K at the policy's window.
"""

from __future__ import annotations

from specbatch.analysis.engines import sglang, trtllm, vllm
from specbatch.analysis.engines.draft_model import draft_of, model_id
from specbatch.analysis.engines.versions import short


def engine_lines(base: dict, policy: str, k: int | None, verify: str, max_num_seqs: int
                 ) -> dict[str, str]:
    """engine -> the line that runs the answer, or a sentence why none does."""
    serve = vllm_serve_flags(base, policy != "ar")
    if policy == "ar":
        out = {e: "no speculative decoding (the answer is ar)"
               for e in ("vllm", "tensorrt-llm", "sglang")}
        if serve:
            out["vllm"] = f"{serve} (no --speculative-config: the answer is ar)"
        return out
    draft, model = draft_of(base), model_id(base)
    note = "" if policy == "fixed" else \
        f" (no engine runs {policy}: its nearest engine setting, fixed K = {k})"
    k = int(k or 1)
    out = {"vllm": (f"{serve} " if serve else "") + vllm.flag(vllm.speculative_config(
        draft=draft, model=model, k=k, verify=verify)) + note}
    if verify == "block":
        out["tensorrt-llm"] = "none: TensorRT-LLM verifies token by token (no block " \
                              "verification); plan with --verify token for its line"
        out["sglang"] = "none: SGLang verifies token by token (no block verification)"
    else:
        out["tensorrt-llm"] = trtllm.line(trtllm.speculative_config(
            draft=draft, model=model, ranges=[(1, max_num_seqs, k)])) + note
        out["sglang"] = sglang.flags(draft=draft, model=model, steps=k, config_path=None) + note
    return out


def versions() -> str:
    """The engine code the lines were checked against."""
    return "; ".join(short(key) for key in ("vllm", "tensorrt-llm-upper", "sglang"))


def vllm_serve_flags(base: dict, speculative: bool = False) -> str:
    """vLLM's ``--quantization`` / ``--kv-cache-dtype`` of the plan's precision (the same
    names: simulator.cost.analytic.precision follows vLLM's) and its ``--async-scheduling``
    as given (simulator.cost.features.async_overhead.resolve_async; ``speculative``: the
    answer has a speculative config), empty at the defaults."""
    from specbatch.fields import AUTO
    from specbatch.simulator.cost.features.async_overhead import resolve_async

    parts = []
    if base.get("quantization", "none") != "none":
        parts.append(f"--quantization {base['quantization']}")
    if base.get("kv_cache_dtype", "auto") != "auto":
        parts.append(f"--kv-cache-dtype {base['kv_cache_dtype']}")
    asked = base.get("async_scheduling", AUTO)
    if asked is False:
        parts.append("--no-async-scheduling")
    elif asked is True and resolve_async(True, draft_of(base), speculative).on:
        parts.append("--async-scheduling")
    return " ".join(parts)
