"""Step-time cost models: how many seconds a batch's draft and target passes take.

Reading order, folders imported one way (tests/test_layout.py): ``interface`` (what the engine
asks of a cost model); ``tabulated`` (a measured pass as tables in Σq plus an attention law: the
form the compiled loop evaluates); ``gpus/`` (the GPU catalogue, one row per GPU, and the roofline
presets derived from it); ``analytic/`` (FLOPs and bytes from first principles: precision formats,
sliding windows, KV groups, memory, the roofline, expert dispatch traffic); ``measured/`` (laws
fitted to measured profiles: a user's profile, Vidur's per-op tables, the RTX GPUs' per-layer
profiles; the calibrated model); ``features/`` (what an engine feature does to a model's price:
CUDA-graph padding, async scheduling, free drafters, draft heads, expert parallelism);
``draft_cost`` (D sequential draft passes), ``verify_cost`` (the rejection sampler), ``registry``
(models by name, the ``cost show`` table), ``report`` (where a pass's time goes).
"""
