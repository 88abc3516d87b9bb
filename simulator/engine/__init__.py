"""The discrete-event engine: replicas, admission, KV, and one decode step at a time.

Reading order: ``core`` (:class:`Engine`: the event loop over replicas, holding one step
composer), ``state`` (the state the engine's parts share, declared in one place, and
``EnginePart``: a part is a view of it), ``request_state`` (the per-request state layout and a
step's outcome), ``admission`` (admission in queue order: FCFS or priority), ``kv`` and
``prefix`` (KV capacity, paged blocks, the prefix cache), ``decode`` (plan, verify, price,
commit, retire: the verbs every composer shares), ``tree_decode`` (what a tree run adds),
``steplog`` (the per-step record log), ``composers`` (the one interface the event loop calls;
which composer a scheduler uses is its row of simulator.config.schedulers), then the step
composers per scheduler: ``v0`` (vllm-v0) and the ``v1`` folder (vllm-v1).
"""
