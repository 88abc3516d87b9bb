"""What an engine feature does to a cost model's price: wrappers and extra terms over a
roofline or measured model.

Reading order: ``graph_padding`` (a pass runs at its CUDA-graph size), ``async_overhead``
(vLLM's async scheduling hides the step overhead under the pass), ``free_draft`` (drafters
that run no model), ``draft_head`` (EAGLE / MTP heads: shape, seconds, memory),
``expert_parallel`` (a MoE target priced per expert-parallel rank), ``host`` (vLLM's host
share of a step: scheduler and input preparation, the proposer loop's per-pass floor, the
n-gram proposer's CPU time).
"""
