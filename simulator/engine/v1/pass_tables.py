"""The compiled vllm-v1 loop's cost tables: a tabulated cost model's PassTables
(simulator.cost.tabulated; the calibrated model's ``pass_table``) packed into the arrays
simulator.engine.v1.kernel.role_time reads, and Q_max, the most query tokens one pass of the
loop can price (:func:`max_pass_tokens`; simulator.engine.v1.compiled.compiled_gap refuses a
run past :data:`MAX_TABLE_TOKENS`).

Imports no numba at module level (the kernel's column indices are read when packing).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from specbatch.simulator.config.sim_config import SimConfig
    from specbatch.simulator.policies.registry import Policy

#: The largest Q_max (:func:`max_pass_tokens`) the compiled loop tabulates a calibrated model
#: for (each table: Q_max + 1 float64 values per part and role).
MAX_TABLE_TOKENS = 1 << 17


def tabulated(model) -> bool:
    """Whether the innermost cost model prices passes from PassTables: its class offers
    simulator.cost.tabulated's ``pass_table`` and ``table_gap`` (the calibrated and aic
    models; read off the class, so a wrapper's attribute forwarding does not count)."""
    cls = type(model)
    return callable(getattr(cls, "pass_table", None)) and callable(getattr(cls, "table_gap", None))


def priced_roles(policy: Policy) -> tuple[str, ...]:
    """The roles whose passes a run prices: the draft only when the policy speculates."""
    return ("target", "draft") if policy.speculates else ("target",)


def max_pass_tokens(config: SimConfig, policy: Policy, sizes: tuple[int, ...]) -> int:
    """Q_max: the most query tokens one pass of the compiled loop can price. A step's target
    pass holds at most the token budget (decodes' 1 + s_i and prompt chunks share it; without
    chunked prefill a prompt that does not fit waits), a draft pass at most the budget (a
    prefill chunk pass) or max_num_seqs (one token per request), a vLLM V1 draft model's pass 1
    the budget + max_num_seqs (simulator.cost.features.draft_model_pass); dsd's goodput scan prices
    max_num_seqs · (k_max + 1) tokens; CUDA-graph padding reaches at most the largest size."""
    q = max(int(config.token_budget), int(config.max_num_seqs))
    if policy.speculates:  # a draft model's pass 1 under vllm-v1: the target's pass + n tokens
        from specbatch.simulator.cost.features.draft_model_pass import draft_model_passes_apply

        if draft_model_passes_apply(config):
            q = int(config.token_budget) + int(config.max_num_seqs)
    if sizes:
        q = max(q, int(max(sizes)))
    if policy.name == "dsd":
        q = max(q, int(config.max_num_seqs) * (int(policy.k_max) + 1))
    return q


def pass_tables(config: SimConfig, policy: Policy, base, sizes: tuple[int, ...],
                roles: tuple[str, ...] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The kernel's ``tab`` # [8, Q_max + 1] and ``tlaw`` # [2, N_TLAW + law] of cost model
    ``base`` under CUDA-graph ``sizes`` (simulator.engine.v1.kernel.role_time): each priced
    role's PassTable (``roles``, default :func:`priced_roles`; a head or a free drafter prices
    the target's only) where the model is :func:`tabulated`, else T_MODE 0 (the roofline
    constants in ``floats``); a grid or regime law packed after N_TLAW (kernel.T_GRID 1 or 2),
    a sampler S[n] in tab row TAB_SAMPLER + role (kernel.T_SAMPLER)."""
    from specbatch.simulator.engine.v1 import kernel as kn

    if not tabulated(base):
        return np.zeros((8, 1)), np.zeros((2, kn.N_TLAW))
    q_max = max_pass_tokens(config, policy, sizes)
    tab = np.zeros((8, q_max + 1))
    tables = {role: base.pass_table(role, q_max)
              for role in (priced_roles(policy) if roles is None else roles)}
    width = max([len(t.attention.grid) + len(t.attention.regimes) for t in tables.values()]
                + [0])
    tlaw = np.zeros((2, kn.N_TLAW + width))
    for i, role in enumerate(("target", "draft")):
        if role not in tables:
            continue
        table = tables[role]
        law = table.attention
        tab[3 * i] = table.layers[:q_max + 1]
        tab[3 * i + 1] = table.allreduce[:q_max + 1]
        tab[3 * i + 2] = table.head[:q_max + 1]
        tlaw[i] = 0.0
        tlaw[i, kn.T_MODE] = 1.0
        tlaw[i, kn.T_FLOPS], tlaw[i, kn.T_FLOPS_RATE] = law.flops, law.flops_rate
        tlaw[i, kn.T_KV], tlaw[i, kn.T_KV_RATE] = law.kv, law.kv_rate
        tlaw[i, kn.T_OVERLAP] = float(bool(law.overlap))
        tlaw[i, kn.T_AFLOOR], tlaw[i, kn.T_PER_REQUEST] = law.floor, law.per_request
        tlaw[i, kn.T_FIXED], tlaw[i, kn.T_FLOOR] = table.fixed, table.floor
        if law.grid:  # the packed grid law after the scalars (kernel.T_GRID)
            tlaw[i, kn.T_GRID] = 1.0
            tlaw[i, kn.N_TLAW:kn.N_TLAW + len(law.grid)] = law.grid
        elif law.regimes:  # the packed regime law there instead
            tlaw[i, kn.T_GRID] = 2.0
            tlaw[i, kn.N_TLAW:kn.N_TLAW + len(law.regimes)] = law.regimes
        if table.sampler is not None:  # S[n] (kernel.TAB_SAMPLER)
            tlaw[i, kn.T_SAMPLER] = 1.0
            tab[kn.TAB_SAMPLER + i] = table.sampler[:q_max + 1]
    return tab, tlaw
