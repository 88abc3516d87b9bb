"""``specbatch tune``: draft-length schedules for the engines, and how far vLLM's rule is from
optimal.

Reading order: ``tuner`` (schedules for vLLM, TensorRT-LLM and SGLang), ``engine_lines`` (each
engine's complete, parser-checked setting: analysis.engines), ``context_table`` (vLLM's
proposed per-(batch, context) table, not merged, only when asked), ``adaptive_gap`` (vLLM's
adaptive verification against the per-step optimum).
"""
