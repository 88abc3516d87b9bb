"""Public measured data, bundled with provenance: per-op GPU profiles and real vLLM runs.

Reading order: ``vidur_profiles`` (Vidur's per-operation timings), ``llmservingsim_attention``
(LLMServingSim's attention rows), ``llmservingsim_profiles`` (its per-layer profiles of the RTX
GPUs), ``vllm_runs`` (measured vLLM serving runs, the fidelity suite).
"""
