"""The engines' own configuration files and flags, written and read back the engines' way.

Every line ``tune`` and ``plan`` print for an engine is built here and checked by a parser
*twin*: a re-implementation of the engine's own parser at a named commit (cited in each
module), pinned in tests/analysis/engines by the engine's documented examples.

Reading order: ``versions`` (which engine code each output was checked against), ``draft_model``
(the draft the engines load), ``vllm`` (``--speculative-config``), ``trtllm``
(``speculative_config`` with ``draft_len_schedule``, both key semantics; TensorRT-LLM #16888),
``sglang`` (the adaptive config file and its flags), ``graph_switch`` (the cost of a
schedule's CUDA-graph mode switch, vLLM #49548).
"""
