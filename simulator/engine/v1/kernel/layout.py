"""The compiled loop's array layouts: which slot of ``ints``, ``floats``, ``regs``, ``st``,
``counts``, the step rows, ema-adaptive's slots and ``pstate`` holds what, and the return codes
of :func:`~simulator.engine.v1.kernel.loop.run_steps`.

simulator.engine.v1.compiled packs these arrays and reads them back; the kernel's modules read
them by these names. Plain integers: importing this module loads no numba.
"""

from __future__ import annotations

# int parameters (``ints``)
I_DEPTH, I_K, I_BUDGET, I_MAX_SEQS, I_CHUNKED, I_CAPACITY, I_DRAFTS_CHUNKS = range(7)
I_VERIFY, I_VOCAB, I_DRAFT_ROWS, I_BLOCK, I_LEADING, I_WRAP, I_PROPOSED = range(7, 14)
I_TETRIS, I_C = 14, 15  # the policy is tetris (TV, confidence surrogate); its C (-1: k per request)
I_PAGED, I_BLOCK_SIZE, I_LOOKAHEAD, I_POOL, I_PREFIX = range(16, 21)  # paged KV, counting cache
I_THRESHOLD = 21  # long_prefill_token_threshold (0: none)
I_DSD, I_KMAX, I_INTERVAL = 22, 23, 24  # the policy is dsd: its window's bound, its interval
I_DSD_VERIFY = 25  # dsd plans with the sampler's seconds (its price_verification was called)
I_PRIORITY = 26  # scheduling_policy "priority": the waiting queue is a heap of ranks
I_REPLICA = 27  # the replica's index (the step rows' first column)
I_POSITIVE = 28  # tetris under BV: monotone_optimum (top-C of the positive entries only)
# kernelpol: the engines' chain policies (simulator.policies.engines, simulator.policies.adaptive)
I_WINDOW = 35  # K from the batch-size table ``window`` (batch-schedule, vllm-dynamic; 0: off)
I_SLOTS = 36  # ema-adaptive: its SGLang slots, rows of ``slot_i`` / ``slot_f`` (0: not it)
I_ADAPTIVE = 37  # vllm-adaptive: 1 sizing B on stale confidences, 2 on fresh ones (0: not it)
I_ROWS = 38  # 1: (d_i, s_i) by trace row from ``row_d`` / ``row_s`` (threshold and the
# stops); 2: hindsight's s_i, the prefix that accepts the most under the step's η (d_i = K)
# (and I_TETRIS = 2: oracle under TV, tetris's top-C on ``conf`` = the path's true Π min(1, r),
# drafting K even at C = 0)
I_EVERY = 39  # an early stop's check interval in events (simulator.engine.core ``stop.every``;
# 0: no early stop): :func:`run_steps` returns STOP before a step whose events reach a check
I_LAG = 40  # vLLM's async scheduling lag: steps scheduled one step ahead
# (simulator.engine.async_lag; 0: off)
I_RULE = 41  # 1: the early stop gave its limits (simulator.engine.stop_limits) and the kernel
# checks them itself (kernel.stop), returning STOPPED where they stop the run; 0: STOP
N_INTS = 42
# float parameters (``floats``): the target's 10 pass constants, the draft's 10, then these
F_OVERHEAD, F_BANDWIDTH, F_VFLOOR, F_PER_POSITION, F_FUSED_FLOOR = range(20, 25)
F_SCALE = 25  # every pass's factor (analysis.sensitivity.ScaledCost; 1.0 = the model itself)
# the LM head's FLOPs per logit row of the target and the draft (PassConstants.head_flops), and
# whether the engine names a pass's logit rows (simulator.cost.interface.takes_logit_rows)
F_HEAD_T, F_HEAD_D, F_ROWS = 26, 27, 28
# vLLM's host terms (simulator.cost.features.host.HostCost around the padded roofline):
# whether they apply, async scheduling (max(t, a + b n) instead of t + b n), a = STEP_S,
# b = REQUEST_S, whether draft passes take the proposer floor, its k_small · g and N_ops · t_op;
# host = "fixed" under async scheduling (simulator.cost.features.async_overhead.
# AsyncOverheadCost: max(t, T_o)) is the same terms with a = T_o, b = 0 and no floor
F_HOST, F_OVERLAP, F_STEP_S, F_REQUEST_S, F_FLOOR, F_KERNELS_S, F_OPS_S = range(29, 36)
F_OUTER = 36  # a ScaledCost's factor around the host terms (factor · host-adjusted pass; 1.0)
# the drafter (simulator.cost.features.draft_head, free_draft, host, draft_model_pass): 0 a
# draft model (the draft role's constants or PassTable, role_time: a chunk pass and k one-token
# passes, vllm-v0's draft worker); 1 a head on the target's hidden states (HeadDraftCost: its
# passes from the F_HP constants, head_time; pass 1 over the target pass); 2 vLLM's n-gram
# proposer under HostCost (draft passes 0 s; its host seconds once per step on the target
# pass's n and Σ(c + q), ngram_time); 3 a free drafter without host terms (0 s); 4 a draft
# model under vLLM V1's proposer (DraftModelPasses: the draft role's role_time, pass 1 over the
# target pass + one token per request as a head's, no chunk pass)
F_DRAFTER = 37
DRAFT_MODEL, DRAFT_HEAD, DRAFT_NGRAM, DRAFT_FREE, DRAFT_MODEL_V1 = 0.0, 1.0, 2.0, 3.0, 4.0
# a head pass's constants (HeadPass.seconds, summed as it sums them), from F_HP on: the FLOPs
# per token of pass 1 and of the later passes ((layer + qkv) + fc, fc on later passes only for
# fc_every_pass), the attention FLOPs, the LM head's FLOPs per row, the fixed bytes of pass 1
# and of later passes (((weights + qkv) + fc) + LM head), KV and activation bytes per token,
# 1 / compute, 1 / memory, the floor, the launch seconds and the all-reduce seconds per token
F_HP = 38
HP_FLOPS1, HP_FLOPS, HP_ATTN, HP_LM, HP_BYTES1, HP_BYTES, HP_KV, HP_ACT = range(8)
HP_INV_C, HP_INV_M, HP_FLOOR, HP_FIXED, HP_COMM = range(8, 13)
HP_EXPERT_BYTES, HP_EXPERTS, HP_MISS = 13, 14, 15  # an MTP layer's experts (as F_MOE's)
F_NGRAM = 54  # the n-gram proposer's c0, c1, c2, c3 (host.NGRAM_CALL_S .. NGRAM_PAIR_S)
# a roofline role's W8A8 FP8 GEMMs and uniform-routing experts (PassConstants), from F_MOE on,
# the target's 5 then the draft's: fp8_flops_per_token, inv_compute_fp8, expert_bytes, E, and
# 1 − k/E (uniform_touched's base, computed as Python computes it; E = 0: dense)
F_MOE = 58
M_FP8, M_INV_FP8, M_EXPERT_BYTES, M_EXPERTS, M_MISS = range(5)
F_NSIZES = 68  # CUDA-graph capture sizes (0: no padding), listed from F_SIZES on, ascending
F_SIZES = 69
N_FLOATS = 69  # without sizes
# the replica's registers (``regs``): arrivals queued, arrivals admitted, running requests,
# reserved tokens (reserve) or free blocks (paged), step rows, preempted requests waiting in
# front, the prefix cache's segment queue (head, tail) and its named segments
R_ARRIVED, R_ADMITTED, R_RUNNING, R_FREE, R_ROWS, R_FRONT, R_HEAD, R_TAIL, R_NAMED = range(9)
R_FINISHED = 9  # requests finished so far (the caller's progress bar)
R_KNOW, R_DSTEPS = 10, 11  # dsd's window k_now and its steps planned (α: clock[1])
R_HEAPN = 12  # waiting requests in the priority heap
R_STEPPED = 13  # whether a step ran (the first step is woken by an arrival)
R_TICK = 14  # an early stop's events since its last check (simulator.engine.core's ``tick``)
R_SKIP = 15  # 1: the caller checked the events before the next step (STOP), go on past them
# async_lag (I_LAG): arrivals the scheduler has seen (at or before the last step's start,
# clock[2]); the last step's finished requests still holding their slots, and the blocks they
# hold (paged; added to R_FREE when freed) or minus the tokens they reserve (reserve mode);
# 1: the last lagged composition was empty, compose again with everything known
R_SEEN, R_GHOST_N, R_GHOST_FREE, R_FULL = 16, 17, 18, 19
# an early stop of a depth-0 policy: the steps left of the run of identical decode steps the
# numpy engine takes as one event (kernel.runs.run_length; 0: none under way)
R_RUN = 20
# STOPPED: the arrivals popped before the event the run stopped at (its time: clock[3])
R_POPPED = 21
N_REGS = 22
# the step rows' two columns after STEP_COLUMNS: whether the step started on an arrival
# (the replica was idle) and that arrival's place in ``order``; the caller merges several
# replicas' rows into the engine's event order with them
W_WOKEN, W_BY = 14, 15
N_STEP_ROWS = 16
# kernelpol: ema-adaptive's slots (simulator.policies.engines.AdaptiveSlot), one row each:
# ``slot_i`` its batch-size key, update_interval, warmup_batches, the number of candidates, the
# current steps, the batches seen, then the candidates ascending; ``slot_f`` ema_alpha,
# down_hysteresis, up_hysteresis, ceiling_coeff and the EMA
SL_KEY, SL_INTERVAL, SL_WARMUP, SL_NC, SL_STEPS, SL_BATCHES, SL_CANDS = range(7)
SF_ALPHA, SF_DOWN, SF_UP, SF_COEFF, SF_EMA = range(5)
# ``pstate``: vllm-adaptive's generation of its stale-survival map (the rows stamped with it
# are in the map), ema-adaptive's slot of the last planned step (-1: none yet)
P_GEN, P_CURRENT = 0, 1
N_PSTATE = 2
# running state rows (``st``); a request's position and counters live in ``counts`` # [5, N]
S_UID, S_PREFILLED, S_FILL, S_BLOCKS = range(4)
N_ST = 4
C_POS, C_STEPS, C_DRAFTED, C_VERIFIED, C_ACCEPTED = range(5)  # RECORD_ROWS
# return codes
DONE, FULL, STUCK, GROW, STOP, STOPPED = 0, 1, 2, 3, 4, 5
