"""The live profile grid times vLLM V1's mixed passes, and a fit on it prices them."""

from __future__ import annotations

import numpy as np
import pytest

from specbatch.live.profile_grid import MIXED_COLUMNS, profile_grid, visited_grid
from specbatch.simulator.cost.measured import profiled


def test_mixed_cells_fill_free_slots_with_one_or_all_joiners():
    cells = visited_grid(8, 3, 20.0, 10)
    mixed = [c for c in cells["target"] if len(c) == 5]
    assert mixed and all(len(c) == 3 for c in cells["draft"])
    for b, q, kv, m, p in mixed:
        assert b < 8 and q == 4 and kv in (20, 25, 30) and p == 20 and m in (1, 8 - b)
    assert {(b, m) for b, _, _, m, _ in mixed} == {(4, 1), (4, 4), (2, 1), (2, 6), (1, 1),
                                                   (1, 7)}
    assert not [c for c in visited_grid(1, 3, 20.0, 10)["target"] if len(c) == 5]


def test_mixed_columns_are_the_ones_the_fit_reads():
    assert MIXED_COLUMNS == profiled.MIXED_COLUMNS


def concatenated_price(model, frame) -> np.ndarray:
    """Each row's pass priced as the simulator prices a mixed step: one target pass over the
    decode rows' queries and the prompts' (on no cache), concatenated."""
    out = []
    for r in frame.itertuples():
        q = np.r_[np.full(r.batch_size, r.query_tokens), np.full(r.prefill_batch, r.prefill_tokens)]
        c = np.r_[np.full(r.batch_size, r.kv_tokens), np.zeros(r.prefill_batch)]
        out.append(model.step_time("target", q.astype(float), c.astype(float)))
    return np.array(out)


# It fits and judges wall-clock timings of a tiny model on this CPU: at load 1 the held-out
# error of the cross-validated family crossed 35 % in 2 of 5 runs (also at the commit before
# this session), so it is a measurement, not a fast-suite specification.
@pytest.mark.slow
def test_a_fit_with_mixed_cells_prices_mixed_passes(tmp_path):
    """On a tiny in-process Llama, a mixed pass costs more than the uniform cells' law says
    (its packed mask spans every row's view). With the grid's mixed cells in the profile, the
    fitted model (the family cross-validation picks, and the NNLS law alone) prices the
    measured mixed passes within 20 % (mean absolute, in sample) and mixed passes of other
    prompt lengths and KV within 35 % (held out), better than the fit on uniform cells alone."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=256, hidden_size=128, intermediate_size=256,
                                      num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=2, max_position_embeddings=512)
    model = transformers.LlamaForCausalLM(config).eval()
    cells = visited_grid(8, 3, 48.0, 24)
    cells["draft"] = []  # the draft has no mixed pass
    held = {"draft": [], "target": [(b, 4, kv, m, p) for b in (3, 5) for kv in (30, 60)
                                    for m in (1, 3) for p in (20, 64)]}
    frame, other = (profile_grid(model, model, ("tiny", "tiny"), c, "cpu", "float32",
                                 warmup=1, repeats=3, progress=False) for c in (cells, held))
    assert list(frame.columns[-2:]) == list(MIXED_COLUMNS)
    mixed = frame[frame.prefill_batch > 0]
    assert len(mixed) == len([c for c in cells["target"] if len(c) == 5])
    frame.to_csv(tmp_path / "with.csv", index=False)
    frame[frame.prefill_batch == 0].drop(columns=list(MIXED_COLUMNS)).to_csv(
        tmp_path / "without.csv", index=False)
    errors = {}
    for name in ("with", "without"):
        for label, families in (("chosen", profiled.FAMILIES), ("nnls", ("nnls",))):
            fit = profiled.fit_profile(tmp_path / f"{name}.csv", roles=("target",),
                                       families=families)
            for rows, split in ((mixed, "in"), (other, "out")):
                y = rows.latency_s.to_numpy()
                errors[name, label, split] = float(
                    np.mean(np.abs(concatenated_price(fit, rows) - y) / y))
    for family in ("chosen", "nnls"):
        assert errors["with", family, "in"] < 0.20, errors
        assert errors["with", family, "out"] < 0.35, errors
        for split in ("in", "out"):
            assert errors["with", family, split] < errors["without", family, split], errors
