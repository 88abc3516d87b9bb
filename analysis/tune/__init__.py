"""``specbatch tune``: draft-length schedules for the engines, and how far vLLM's rule is from optimal.

Reading order: ``tuner`` (schedules for vLLM, TensorRT-LLM and SGLang), ``adaptive_gap``
(vLLM's adaptive verification against the per-step optimum).
"""
