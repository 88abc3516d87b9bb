"""Tree nodes across a batch: the exact optimum against the confidence rules, and its cost.

On a bundled tree trace (default ``smollm2-drop2-tree``: top-k ``2,2,1`` trees, 10 draft nodes
per position), random batches of n position rows (without replacement, seed fixed) share a
budget of C = k·n verified nodes. For each batch, the expected accepted length Σ r (reach of
recursive rejection sampling, theory/tree_alloc.py) of:

- ``optimum``: :func:`optimal_subtrees` (the best draw-prefix-closed subtrees, exact);
- ``greedy r``: :func:`frontier_greedy` on the reach values themselves (TETRIS with the exact
  per-node values, frontier kept closed);
- ``top-C conf``: the global top-C nodes by path draft confidence (TETRIS over nodes, the
  simulator's ``tetris-tree`` without its per-request cap), ranked by the simulator's own
  score (``TreeTables.conf``: monotone along the predecessor chain, a no-op on top-k trees,
  and 0 for a repeated sibling token; the last column counts batches where the raw-confidence
  top-C was not closed);
- ``static conf``: each request's top-k nodes by the same score (SGLang's rule, the
  simulator's ``static-tree``);
- ``static opt``: each request's best closed subtree of k nodes (the per-request optimum at
  a fixed size, isolating what moving nodes between requests adds).

Means over the batches of Σ r per request, plus how often and by how much the global top-C
loses to the static rule. Then the time of one :func:`optimal_subtrees` call (best of
``--repeats`` means over 200 calls; the machine is shared).

    .venv/bin/python benchmarks/tree_alloc_bench.py [--batches 200] [--json]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from specbatch.simulator.tree_tables import TreeTables
from specbatch.theory import tree_alloc as A
from specbatch.theory import tree_reach as R
from specbatch.traces.format import read_trace


def trace_arrays(name: str) -> tuple:
    """(pred # [N], reach # [rows, N], raw path confidence # [rows, N], the simulator's
    ranking score # [rows, N]) of a tree trace: :class:`TreeTables`' ``conf`` (monotone along
    pred, repeated sibling tokens at 0), what ``tetris-tree`` and ``static-tree`` rank by."""
    trace = read_trace(name)
    t = trace.tree
    n = int(t.node_offsets[1])
    pred = R.predecessors(t.parent, t.draw_offsets, t.draws, t.node_offsets).reshape(-1, n)[0]
    r = R.reach_values(t.node_offsets, t.parent, t.draw_offsets, t.draws, t.rrs_accept)
    conf = R.path_products(t.node_offsets, t.parent, t.draft_conf)
    return pred, r.reshape(-1, n), conf.reshape(-1, n), TreeTables(trace).conf


def compare(pred, r, conf, ranked_all, n: int, k: int, batches: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    out, open_sets = [], 0
    for _ in range(batches):
        rows = rng.choice(r.shape[0], n, replace=False)
        rb, cb = r[rows], conf[rows]
        _, opt = A.optimal_subtrees(pred, rb, k * n)
        table = A.best_by_size(pred, rb, min(k, pred.size - 1))
        open_sets += int(not R.is_closed(pred, A.top_nodes(cb, k * n)).all())
        ranked = ranked_all[rows]
        out.append((opt, (rb * A.frontier_greedy(pred, rb, k * n))[:, 1:].sum(),
                    (rb * A.top_nodes(ranked, k * n))[:, 1:].sum(),
                    (rb * A.top_nodes_per_request(ranked, k))[:, 1:].sum(),
                    table.value[:, -1].sum()))
    v = np.array(out) / n  # [batches, 5] per request
    loss = v[:, 3] - v[:, 2]  # static conf − top-C conf
    return {"n": n, "k": k, "C": k * n, "optimum": v[:, 0].mean(), "greedy_r": v[:, 1].mean(),
            "topc_conf": v[:, 2].mean(), "static_conf": v[:, 3].mean(),
            "static_opt": v[:, 4].mean(), "topc_loses": int((loss > 1e-12).sum()),
            "worst_loss": float(max(loss.max(), 0.0)), "topc_not_closed": open_sets,
            "batches": batches}


def time_call(pred, r, n: int, repeats: int) -> float:
    rows = np.random.default_rng(0).choice(r.shape[0], n, replace=False)
    rb = r[rows]
    best = np.inf
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(200):
            A.optimal_subtrees(pred, rb, 3 * n)
        best = min(best, (time.perf_counter() - start) / 200)
    return best * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trace", default="smollm2-drop2-tree")
    ap.add_argument("--batches", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    pred, r, conf, ranked = trace_arrays(args.trace)
    table = [compare(pred, r, conf, ranked, n, k, args.batches, args.seed)
             for n in (8, 32, 64) for k in (2, 3, 4, 6)]
    timing = {n: time_call(pred, r, n, args.repeats) for n in (8, 64)}
    if args.json:
        print(json.dumps({"trace": args.trace, "rows": table,
                          "us_per_call": {str(n): t for n, t in timing.items()}}))
        return
    print(f"trace {args.trace}: {r.shape[0]} rows, {pred.size - 1} draft nodes per tree, "
          f"E[tau] of the full tree {r[:, 1:].sum(axis=1).mean():.4f}")
    print("   n  k    C  optimum  greedy r  top-C conf  static conf  static opt  "
          "top-C loses  worst   top-C open")
    for row in table:
        print(f"{row['n']:4d} {row['k']:2d} {row['C']:4d}  {row['optimum']:.4f}   "
              f"{row['greedy_r']:.4f}    {row['topc_conf']:.4f}       {row['static_conf']:.4f}"
              f"      {row['static_opt']:.4f}   {row['topc_loses']:4d}/{row['batches']}"
              f"     {row['worst_loss']:.4f}  {row['topc_not_closed']:4d}")
    for n, t in timing.items():
        print(f"optimal_subtrees n={n} N={pred.size} C={3 * n}: {t:.0f} us per call")


if __name__ == "__main__":
    main()
