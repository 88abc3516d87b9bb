"""Step-time cost models: how many seconds a batch's draft and target passes take.

Reading order: ``interface`` (what the engine asks of a cost model), ``registry`` (models by
name, the ``cost show`` table), ``hardware`` (GPU presets), ``roofline`` (FLOPs and bytes),
``profiled`` / ``profile_file`` / ``role_fit`` (laws fitted to a measured profile),
``calibrated`` / ``calibrated_sources`` / ``calibrated_fit`` / ``gemm_fit`` (public per-op
profiles), ``graph_padding`` (CUDA-graph sizes), ``draft_cost`` (D sequential draft passes),
``verify_cost`` (the rejection sampler), ``free_draft`` (drafters that run no model),
``report`` (where a pass's time goes).
"""
