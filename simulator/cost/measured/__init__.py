"""Cost models fitted to measured profiles.

Reading order: ``profile_file`` (a latency profile read and checked), ``role_fit`` (one
role's law fitted to it), ``profiled`` (the profiled cost model); ``gemm_fit`` (roofline
efficiencies fitted to per-GEMM profiles), ``laws`` (the calibrated per-op laws fitted to
Vidur-layout tables), ``sources`` (the stored laws, NCCL curves, table cells and validated
errors they are priced from), ``transfer`` (a shape priced from its profiled
neighbour), ``lss_attention`` (the RTX GPUs' fitted attention law), ``lss`` (their passes from
the per-layer profiles), ``calibrated_role`` (a role's pass from Vidur's table cells and
the laws), ``calibrated`` (the calibrated cost model); ``aic_laws``
(per-op laws with the terms AIConfigurator's measured vLLM tables show, and their
leave-one-shape-out errors) and ``aic_import`` (``cost import-aiconfigurator``: the laws of
traces.public.aiconfigurator's rows, written or loaded from the bundle). ``data/`` holds
the stored laws and their validation (benchmarks/cost_vs_public.py --write).
"""
