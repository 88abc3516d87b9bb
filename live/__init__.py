"""Live batched speculative decoding on Hugging Face causal LMs, measured like the simulator.

:func:`specbatch.live.loop.run_live` runs N requests through a real draft/target engine with the
simulator's scheduling (iteration-level continuous batching: arrivals, FCFS admission into
``max_num_seqs`` slots, steps composed by vLLM V1's rule, one token budget per step with joiners
prefilled in the decode step, or V0's prefill-only steps; requests leaving when done) and records
exactly the tables :mod:`specbatch.simulator.metrics` defines, so a live run and its simulation
compare column by column (``specbatch validate``, :mod:`specbatch.analysis.validate.live`). The
policy is the simulator's own (:meth:`specbatch.simulator.policies.registry.Policy.decide` on a view
of the live draft's signals).

Modules, one concept each:

- :mod:`.config`: :class:`LiveConfig`, the settings, and the equivalent simulator config;
- :mod:`.models`: loading a draft/target pair (or random weights of a named shape), random
  prompts;
- :mod:`.cache`: :class:`SlotCache`, one model's KV cache as one slot row per running request;
- :mod:`.batch`: the running batch (request ids and the tokens pending for each cache);
- :mod:`.ngram`: the n-gram (prompt-lookup) draft verb: no draft model, one-hot drafts, the
  proposed counts that cap the shared policies;
- :mod:`.pool`: arrivals (the simulator's draws), the FCFS queue and the clock rule;
- :mod:`.timeline`: the measured clock (CUDA-synchronised, instrumentation paused);
- :mod:`.state`: :class:`~.state.Live`, what the verbs share, counter-based draws and the
  step record;
- :mod:`.loop`: the verbs ``prefill``, ``draft``, ``decide``, ``target_pass``, ``verify``,
  ``commit``, ``retire`` and :func:`run_live`, which composes them with the pool by the
  scheduler's rule;
- :mod:`.record`: per-pass and per-step records, :class:`LiveResult`, the trace of the
  visited positions, writing and reading an output directory;
- :mod:`.profile_grid`: timing both models on the run's (batch, query, KV) grid;
- :mod:`.serving`: the engine as a server's core (``specbatch live serve``): a background
  batching loop that requests join at any time, each with its own temperature and seed, the
  verifier a sampler with ``specbatch conform``'s engine signature, vLLM's counters;
- :mod:`.http_api`: its OpenAI-compatible HTTP face (FastAPI + uvicorn, the ``serve`` extra).
"""
