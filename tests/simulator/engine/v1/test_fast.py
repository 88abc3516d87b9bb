"""The vllm-v1 step without the composer (simulator.engine.v1.fast), on hand-made batches.

Its results equal the composer's on random workloads (tests/simulator/engine/v1/test_runs.py); these
pin what it does on its own: an admitted prompt joins prefilled and emits its first token,
and a pool too small for the running requests' growth leaves the step to the composer.
"""

from __future__ import annotations

import numpy as np

from specbatch.simulator.config.sim_config import load_config
from specbatch.simulator.engine.core import Engine
from specbatch.simulator.engine.request_state import Row
from specbatch.simulator.policies.registry import make_policy
from specbatch.simulator.workload.arrivals import build_workload
from tests.simulator.engine.v1.test_runs import ROOFLINE
from tests.simulator.helpers import LinearCost, const_trace


def engine(trace, cost, **kw) -> Engine:
    config = load_config(None, trace="synth", requests=trace.n_requests, policy="ar", **kw)
    return Engine(config, trace, build_workload(config, trace), cost,
                  make_policy(config, trace.K), capacity=config.kv_capacity)


def decoding(eng: Engine, uids, pos, blocks=0):
    rep = eng.replicas[0]
    state = eng.initial.take(list(uids), axis=1)
    state[Row.POS] = pos
    state[Row.PREFILLED] = state[Row.FILL]
    state[Row.BLOCKS] = blocks
    rep.state = state
    rep.free_blocks -= int(state[Row.BLOCKS].sum())
    return rep


def test_an_admitted_prompt_joins_prefilled_and_emits_its_first_token():
    """Reserve mode, two requests decoding, a prompt of 6 waiting with room and budget: one
    step decodes both and prefills the whole prompt, which emits its first token at the
    step's end (position 1) and is recorded as 6 prefill tokens."""
    trace = const_trace(n_requests=3, prompt_len=6, output_len=20)
    eng = engine(trace, ROOFLINE, max_num_seqs=4)
    rep = decoding(eng, [0, 1], [3, 3])
    rep.waiting.append(2)
    duration = eng.composer.step(rep, 10.0)
    row = eng.rec.step_rows[-1]
    assert (row.batch, row.prefill_tokens, row.emitted) == (2, 6, 3)
    assert rep.state[Row.UID].tolist() == [0, 1, 2] and not rep.waiting
    assert rep.state[Row.PREFILLED].tolist() == [6, 6, 6] and rep.n_prefilling == 0
    assert rep.state[Row.POS].tolist() == [4, 4, 1]
    assert eng.rec.first_token[2] == row.end == 10.0 + duration


def test_a_pool_short_of_the_growth_leaves_the_step_to_the_composer():
    """Paged, block size 4, two requests at t = 5 (prompt 4) each holding the 2 blocks of
    their 8 computed slots: the next token needs a third block each, and the pool has one
    free. The step without the composer declines (None) and changes nothing; the composer
    then preempts the newest."""
    trace = const_trace(n_requests=2, prompt_len=4, output_len=20)
    eng = engine(trace, LinearCost(), kv_mode="paged", block_size=4, kv_capacity=20,
                 enable_prefix_caching=False)
    rep = decoding(eng, [0, 1], [5, 5], blocks=[2, 2])
    assert rep.free_blocks == 1
    planned = eng.composer.plan_decode(rep, rep.state)
    before = rep.state.copy()
    assert eng.fast.fast_step(rep, 0.0, planned, rep.state) is None
    assert np.array_equal(rep.state, before) and rep.free_blocks == 1
    eng.composer.step(rep, 0.0)
    assert rep.state[Row.UID].tolist() == [0] and eng.rec.preemptions.tolist() == [0, 1]
