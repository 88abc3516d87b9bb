"""The vllm-v1 event loop compiled with numba: one call runs many steps of one replica.

The numpy engine (simulator.engine.core with simulator.engine.v1.step) is this kernel's
reference twin; :mod:`simulator.engine.v1.compiled` says where the kernel applies and drives it.
It covers one replica; FCFS or priority admission (a min-heap of simulator.engine.admission's
ranks); reserve or paged KV (the growth of simulator.engine.v1.compose.V1Composer.compose,
preemption of the newest by recompute as its ``preempt_walk``, and the prefix cache's counting
path, simulator.engine.prefix.PrefixCache with ``lazy``); ``long_prefill_token_threshold``;
chain policies planning d_i = s_i = min(k, proposed) (``fixed``; ``ar`` is k = 0; ``dsd``'s k
from its goodput scan every interval, α updated from each step's τ) or TETRIS's top-C of the
cumulative draft confidence (``tetris``, d_i = K; simulator.policies.papers.Tetris with
:func:`monotone_topc`, theory.allocate.budget's tie order; under BV its monotone_optimum); the
engines' policies (simulator.engine.v1.policy_arrays packs them): one K for the batch from a
table of the decoding batch size (``batch-schedule``: vLLM's
``num_speculative_tokens_per_batch_size`` and TensorRT-LLM's ``draft_len_schedule``;
``vllm-dynamic``'s goodput argmax), from SGLang's adaptive slots (``ema-adaptive``:
:func:`ema_observe`, :func:`ema_recompute`) or vLLM's adaptive verification (``vllm-adaptive``:
d_i = K, s_i the top B* slots, :func:`adaptive_plan`, its stale survival map per trace row), the
row-wise ones, (d_i, s_i) a table of the trace row (``threshold``, ``specdec++``,
``entropy-stop``), and the bounds ``hindsight`` (the prefix that accepts the most under the
step's η) and ``oracle`` under TV (top-C of the path's true survival); a chain rule scanning its
thresholds (TV: leading successes, BV: the last success; simulator.replay.chain); the roofline's
sums formula (simulator.cost.analytic.roofline.RooflineCost.time_from_sums; uniform experts and
FP8 GEMMs too) or a role's PassTable (simulator.cost.tabulated.table_time: the calibrated
model's passes, :func:`role_time`), vLLM's host terms around it
(simulator.cost.features.host.HostCost: :func:`host_target`, :func:`host_draft`) and the
rejection sampler's seconds (simulator.cost.verify_cost.VerifyCost.seconds); a draft model, an
EAGLE / EAGLE-3 / MTP head (:func:`head_time`, its pass 1 on the target pass:
:func:`first_pass`), vLLM's n-gram proposer's host seconds (:func:`ngram_time`) or a free
drafter. Every float is computed by the numpy path's expressions in the same order, on the same
exact integer sums, so the step and request tables are bit-identical
(tests/simulator/engine/v1/test_compiled.py).

Modules, in reading order: ``layout`` (the arrays' slots and the return codes), ``acceptance``
(η, the replay's uniforms), ``pricing`` (a pass's seconds: roofline or PassTable, host terms,
the sampler), ``policy`` (the draft-length rules), ``admission`` (the priority heap, the
engine's events between steps), ``prefix`` (the prefix cache's counting path), ``runs`` (an
early stop's runs of identical ``ar`` decode steps, one event each), ``stop`` (an early stop's
rule checked in the loop), then a step's pieces in the order it runs them: ``plan`` (the
decoding requests' (d_i, s_i), and what the policies observe of the outcome), ``compose`` (who
runs with how many tokens: the running requests, preemption, admission), ``verify`` (the
decoding requests verified and committed), ``passes`` (the step's passes priced, its chunks
prefilled), ``record`` (first tokens, the finished retired), and ``loop``
(:func:`~simulator.engine.v1.kernel.loop.run_steps`, the driver: events, the async lag's view,
the step's pieces, its row of the step log). The package re-exports
every name, so ``kernel.X`` reads as one module (simulator.engine.v1.compiled.load_kernel
returns it). Numba's cache (``cache=True``) checks only a function's own file, not the files of
the functions it calls, so compiled.load_kernel drops the cached kernels when any of these files
changes (compiled.kernel_stamp).

The package imports numba; import it only where numba is installed.
"""

from __future__ import annotations

from specbatch.simulator.engine.v1.kernel.acceptance import (  # noqa: F401 - kernel.X
    eta,
)
from specbatch.simulator.engine.v1.kernel.admission import (  # noqa: F401 - kernel.X
    heap_pop,
    heap_push,
    step_events,
)
from specbatch.simulator.engine.v1.kernel.compose import (  # noqa: F401 - kernel.X
    admit_waiting,
    schedule_running,
)
from specbatch.simulator.engine.v1.kernel.layout import (  # noqa: F401 - kernel.X
    C_ACCEPTED,
    C_DRAFTED,
    C_POS,
    C_STEPS,
    C_VERIFIED,
    DONE,
    DRAFT_FREE,
    DRAFT_HEAD,
    DRAFT_MODEL,
    DRAFT_MODEL_V1,
    DRAFT_NGRAM,
    F_BANDWIDTH,
    F_DRAFTER,
    F_FLOOR,
    F_FUSED_FLOOR,
    F_HEAD_D,
    F_HEAD_T,
    F_HOST,
    F_HP,
    F_KERNELS_S,
    F_MOE,
    F_NGRAM,
    F_NSIZES,
    F_OPS_S,
    F_OUTER,
    F_OVERHEAD,
    F_OVERLAP,
    F_PER_POSITION,
    F_REQUEST_S,
    F_ROWS,
    F_SCALE,
    F_SIZES,
    F_STEP_S,
    F_VFLOOR,
    FULL,
    GROW,
    HP_ACT,
    HP_ATTN,
    HP_BYTES,
    HP_BYTES1,
    HP_COMM,
    HP_EXPERT_BYTES,
    HP_EXPERTS,
    HP_FIXED,
    HP_FLOOR,
    HP_FLOPS,
    HP_FLOPS1,
    HP_INV_C,
    HP_INV_M,
    HP_KV,
    HP_LM,
    HP_MISS,
    I_ADAPTIVE,
    I_BLOCK,
    I_BLOCK_SIZE,
    I_BUDGET,
    I_C,
    I_CAPACITY,
    I_CHUNKED,
    I_DEPTH,
    I_DRAFT_ROWS,
    I_DRAFTS_CHUNKS,
    I_DSD,
    I_DSD_VERIFY,
    I_EVERY,
    I_INTERVAL,
    I_K,
    I_KMAX,
    I_LAG,
    I_LEADING,
    I_LOOKAHEAD,
    I_MAX_SEQS,
    I_PAGED,
    I_POOL,
    I_POSITIVE,
    I_PREFIX,
    I_PRIORITY,
    I_PROPOSED,
    I_REPLICA,
    I_ROWS,
    I_RULE,
    I_SLOTS,
    I_TETRIS,
    I_THRESHOLD,
    I_VERIFY,
    I_VOCAB,
    I_WINDOW,
    I_WRAP,
    M_EXPERT_BYTES,
    M_EXPERTS,
    M_FP8,
    M_INV_FP8,
    M_MISS,
    N_FLOATS,
    N_INTS,
    N_PSTATE,
    N_REGS,
    N_ST,
    N_STEP_ROWS,
    P_CURRENT,
    P_GEN,
    R_ADMITTED,
    R_ARRIVED,
    R_DSTEPS,
    R_FINISHED,
    R_FREE,
    R_FRONT,
    R_HEAD,
    R_HEAPN,
    R_KNOW,
    R_NAMED,
    R_POPPED,
    R_ROWS,
    R_RUN,
    R_RUNNING,
    R_SKIP,
    R_STEPPED,
    R_TAIL,
    R_TICK,
    S_BLOCKS,
    S_FILL,
    S_PREFILLED,
    S_UID,
    SF_ALPHA,
    SF_COEFF,
    SF_DOWN,
    SF_EMA,
    SF_UP,
    SL_BATCHES,
    SL_CANDS,
    SL_INTERVAL,
    SL_KEY,
    SL_NC,
    SL_STEPS,
    SL_WARMUP,
    STOP,
    STOPPED,
    STUCK,
    W_BY,
    W_WOKEN,
)
from specbatch.simulator.engine.v1.kernel.loop import (  # noqa: F401 - kernel.X
    run_steps,
)
from specbatch.simulator.engine.v1.kernel.passes import (  # noqa: F401 - kernel.X
    step_passes,
)
from specbatch.simulator.engine.v1.kernel.plan import (  # noqa: F401 - kernel.X
    observe_outcome,
    plan_decoding,
)
from specbatch.simulator.engine.v1.kernel.policy import (  # noqa: F401 - kernel.X
    adaptive_plan,
    dsd_goodput,
    ema_observe,
    ema_recompute,
    monotone_topc,
    select,
)
from specbatch.simulator.engine.v1.kernel.prefix import (  # noqa: F401 - kernel.X
    seg_give,
    seg_park,
    seg_room,
    seg_take,
    seg_touch,
)
from specbatch.simulator.engine.v1.kernel.pricing import (  # noqa: F401 - kernel.X
    N_TLAW,
    T_AFLOOR,
    T_FIXED,
    T_FLOOR,
    T_FLOPS,
    T_FLOPS_RATE,
    T_GRID,
    T_KV,
    T_KV_RATE,
    T_MODE,
    T_OVERLAP,
    T_PER_REQUEST,
    T_SAMPLER,
    TAB_SAMPLER,
    decode_draft_seconds,
    draft_time,
    first_pass,
    graph_pad,
    grid_attention,
    head_time,
    host_draft,
    host_target,
    ngram_time,
    pass_time,
    regime_attention,
    role_time,
    verify_seconds,
)
from specbatch.simulator.engine.v1.kernel.record import (  # noqa: F401 - kernel.X
    emit_completed,
    retire,
)
from specbatch.simulator.engine.v1.kernel.runs import (  # noqa: F401 - kernel.X
    run_blocks,
    run_length,
)
from specbatch.simulator.engine.v1.kernel.stop import (  # noqa: F401 - kernel.X
    checked_events,
    events_before,
    stop_rule,
    tick,
    tick_through,
)
from specbatch.simulator.engine.v1.kernel.verify import (  # noqa: F401 - kernel.X
    verify_commit,
)
