"""vLLM V1's step (``scheduler = "vllm-v1"``): one token budget per step, mixed steps.

Reading order: ``compose`` (the general composer: which requests run and how many tokens each),
``reference`` (its reference twin, one request at a time as vLLM's ``schedule()`` reads),
``fast`` (the composer's answer where it is known without composing), ``runs`` (runs of
identical decode steps taken at once), ``batch`` (the named records a composed step runs),
``step`` (one V1 step end to end: the composer of the catalogue's ``vllm-v1`` row,
simulator.config.schedulers).

The same loop compiled with numba (``engine = "compiled"``): ``compiled`` (which engine runs a
simulation; loading the kernel), ``pass_tables`` and ``policy_arrays`` (the cost model's and
the policy's arrays), ``driver`` (a run packed into the kernel's arrays, its tables collected)
and ``kernel`` (the numba loop itself, a package).
"""
