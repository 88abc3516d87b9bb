"""The discrete-event engine: replicas, admission, KV, and one decode step at a time.

Reading order: ``core`` (:class:`Engine`: the event loop over replicas), ``state`` (the
state the engine's parts share, declared in one place), ``request_state`` (the per-request
state layout and a step's outcome), ``admission`` (FCFS admission), ``kv`` and ``prefix`` (KV
capacity, paged blocks, the prefix cache), ``decode`` (plan, verify, price, commit),
``tree_decode`` (what a tree run adds), ``steplog`` (the per-step record log), ``composers``
(the one interface the event loop calls and its ``{scheduler: composer}`` table), then the
step composers per scheduler: ``v0`` (vllm-v0) and the ``v1`` folder (vllm-v1).
"""
