"""``specbatch conform --endpoint``: black-box losslessness checks of a running
OpenAI-compatible server (vLLM, SGLang, trtllm-serve, ``specbatch live serve``).

Reading order: ``client`` (HTTP with timeouts, retries and a request budget; the acceptance
counters of ``/metrics``), ``target_law`` (the exact target law of the first m tokens from
the target model), ``check`` (drawing, the law tests, greedy equivalence, the report).
"""
