"""Step-time cost models: how many seconds a batch's draft and target passes take.

Reading order: ``interface`` (what the engine asks of a cost model), ``registry`` (models by
name, the ``cost show`` table), ``gpus`` (the GPU catalogue: one row per GPU),
``hardware`` (the roofline presets derived from it), ``roofline`` (FLOPs and bytes), ``memory`` (the KV
capacity next to the weights),
``profiled`` / ``profile_file`` / ``role_fit`` (laws fitted to a measured profile),
``calibrated`` / ``calibrated_sources`` / ``calibrated_fit`` / ``gemm_fit`` (public per-op
profiles), ``calibrated_lss`` / ``calibrated_transfer`` (the RTX GPUs' per-layer profiles), ``graph_padding`` (CUDA-graph sizes), ``draft_cost`` (D sequential draft passes),
``verify_cost`` (the rejection sampler), ``free_draft`` (drafters that run no model),
``async_overhead`` (vLLM's async scheduling: the step overhead under the pass),
``report`` (where a pass's time goes).
"""
