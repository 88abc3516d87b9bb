"""Step times from first principles: FLOPs and bytes over a GPU preset's peaks.

Reading order: ``precision`` (weight and KV formats and their bytes), ``window``
(sliding-window attention sums), ``kv_groups`` (vLLM V1's KV cache groups and block pool),
``memory`` (the KV tokens left next to the weights; whether the weights fit at all),
``roofline`` (the roofline cost model), ``all2all`` (expert parallelism's dispatch/combine
traffic).
"""
