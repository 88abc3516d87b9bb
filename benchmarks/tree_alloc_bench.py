"""Tree nodes across a batch: the exact optimum against the confidence rules, and its cost.

On a bundled tree trace (default ``smollm2-drop2-tree``: top-k ``2,2,1`` trees, 10 draft nodes
per position), random batches of n position rows (without replacement, seed fixed) share a
budget of C = k·n verified nodes. For each batch, the expected accepted length Σ r (reach of
recursive rejection sampling, theory/trees/alloc.py) of:

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
  a fixed size, isolating what moving nodes between requests adds);
- ``learned`` / ``logistic``: ``tetris-tree --predictor learned|logistic`` without its cap,
  the batch's C nodes by the predicted reach of a per-node acceptance model
  (simulator/replay/tree_accept_predictor.py: ``frontier_greedy`` on r̂) fitted on the tree nodes of
  ``--calibration-split F`` of the trace's requests (seeded as a simulation's split);
  ``static learned``: each request's first k nodes by the same score.

With a calibration split every column is measured on batches of the other requests' rows
only; without one (the default) every row is, and the learned columns are left out.

Means over the batches of Σ r per request, plus how often and by how much the global top-C
loses to the static rule. Then the time of one :func:`optimal_subtrees` call (best of
``--repeats`` means over 200 calls; the machine is shared).

    .venv/bin/python benchmarks/tree_alloc_bench.py [--batches 200] [--json]
    .venv/bin/python benchmarks/tree_alloc_bench.py --trace smollm2-drop2-tree-iid \
        --calibration-split 0.25 --ns 8,32 --ks 2,3,4 --no-timing
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from specbatch.simulator.policies.calibration import split_requests
from specbatch.simulator.policies.trees import top_counts
from specbatch.simulator.replay.tree import TreeTables
from specbatch.simulator.replay.tree_accept_predictor import fit_tree_predictor
from specbatch.theory.trees import alloc as A
from specbatch.theory.trees import reach as R
from specbatch.traces.format.files import read_trace
from specbatch.traces.format.ranges import concat_ranges

#: Fitted kinds the learned columns report.
KINDS = ("learned", "logistic")


def learned_rankings(trace, fraction: float, seed: int) -> tuple:
    """(rows # [R] the replayed requests' rows, {kind: NodeRanking of every row}) with each
    predictor fitted on the calibration requests only (``calibration_split = fraction``,
    ``seed``: the split a simulation with that seed makes). Without a split: every row, {}."""
    if not fraction:
        return np.arange(trace.n_rows), {}
    calibrate, replay = split_requests(trace.n_requests, fraction, seed)
    tables = TreeTables(trace)
    fitted = {kind: fit_tree_predictor(trace.subset(calibrate), kind) for kind in KINDS}
    rows = concat_ranges(trace.offsets[replay], trace.output_len[replay])
    return rows, {kind: p.ranking(trace, tables) for kind, p in fitted.items()}


def trace_arrays(trace) -> tuple:
    """(pred # [N], reach # [rows, N], raw path confidence # [rows, N], the simulator's
    ranking score # [rows, N]) of a tree trace: :class:`TreeTables`' ``conf`` (monotone along
    pred, repeated sibling tokens at 0), what ``tetris-tree`` and ``static-tree`` rank by."""
    t = trace.tree
    n = int(t.node_offsets[1])
    pred = R.predecessors(t.parent, t.draw_offsets, t.draws, t.node_offsets).reshape(-1, n)[0]
    r = R.reach_values(t.node_offsets, t.parent, t.draw_offsets, t.draws, t.rrs_accept)
    conf = R.path_products(t.node_offsets, t.parent, t.draft_conf)
    return pred, r.reshape(-1, n), conf.reshape(-1, n), TreeTables(trace).conf


def learned_values(rankings: dict, rb: np.ndarray, rows: np.ndarray, k: int, n: int) -> list:
    """Σ r of the uncapped learned top-C and of the static first-k, per kind."""
    out = []
    for ranking in rankings.values():
        cap = ranking.score.shape[1]
        counts = top_counts(ranking.score[rows, :cap], k * n)
        out.append((rb * ranking.prefix_mask(rows, counts))[:, 1:].sum())
        static = np.minimum(k, cap) + np.zeros(n, dtype=np.int64)
        out.append((rb * ranking.prefix_mask(rows, static))[:, 1:].sum())
    return out


def compare(pred, r, conf, ranked_all, n: int, k: int, batches: int, seed: int,
            pool: np.ndarray | None = None, rankings: dict | None = None) -> dict:
    """Means over ``batches`` random batches of n rows of ``pool`` (default: every row)."""
    rng = np.random.default_rng(seed)
    pool = np.arange(r.shape[0]) if pool is None else pool
    rankings = rankings or {}
    out, open_sets = [], 0
    for _ in range(batches):
        rows = pool[rng.choice(pool.size, n, replace=False)]
        rb, cb = r[rows], conf[rows]
        _, opt = A.optimal_subtrees(pred, rb, k * n)
        table = A.best_by_size(pred, rb, min(k, pred.size - 1))
        open_sets += int(not R.is_closed(pred, A.top_nodes(cb, k * n)).all())
        ranked = ranked_all[rows]
        out.append((opt, (rb * A.frontier_greedy(pred, rb, k * n))[:, 1:].sum(),
                    (rb * A.top_nodes(ranked, k * n))[:, 1:].sum(),
                    (rb * A.top_nodes_per_request(ranked, k))[:, 1:].sum(),
                    table.value[:, -1].sum(), *learned_values(rankings, rb, rows, k, n)))
    v = np.array(out) / n  # [batches, 5 + 2 per kind] per request
    loss = v[:, 3] - v[:, 2]  # static conf − top-C conf
    row = {"n": n, "k": k, "C": k * n, "optimum": v[:, 0].mean(), "greedy_r": v[:, 1].mean(),
           "topc_conf": v[:, 2].mean(), "static_conf": v[:, 3].mean(),
           "static_opt": v[:, 4].mean(), "topc_loses": int((loss > 1e-12).sum()),
           "worst_loss": float(max(loss.max(), 0.0)), "topc_not_closed": open_sets,
           "batches": batches}
    for j, kind in enumerate(rankings):
        top, static = v[:, 5 + 2 * j], v[:, 6 + 2 * j]
        row[kind] = top.mean()
        row[f"static_{kind}"] = static.mean()
        row[f"{kind}_beats_static"] = int((top > v[:, 3] + 1e-12).sum())
        row[f"{kind}_beats_topc"] = int((top > v[:, 2] + 1e-12).sum())
    return row


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
    ap.add_argument("--calibration-split", type=float, default=0.0,
                    help="fit the learned columns on this fraction of the requests")
    ap.add_argument("--ns", default="8,32,64", help="batch sizes, comma-separated")
    ap.add_argument("--ks", default="2,3,4,6", help="nodes per request, comma-separated")
    ap.add_argument("--no-timing", action="store_true")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    trace = read_trace(args.trace)
    pred, r, conf, ranked = trace_arrays(trace)
    pool, rankings = learned_rankings(trace, args.calibration_split, args.seed)
    table = [compare(pred, r, conf, ranked, n, k, args.batches, args.seed, pool, rankings)
             for n in map(int, args.ns.split(",")) for k in map(int, args.ks.split(","))]
    timing = {} if args.no_timing else {n: time_call(pred, r, n, args.repeats) for n in (8, 64)}
    if args.json:
        print(json.dumps({"trace": args.trace, "calibration_split": args.calibration_split,
                          "replayed_rows": int(pool.size), "rows": table,
                          "us_per_call": {str(n): t for n, t in timing.items()}}))
        return
    print(f"trace {args.trace}: {r.shape[0]} rows ({pool.size} evaluated), {pred.size - 1} "
          f"draft nodes per tree, E[tau] of the full tree {r[:, 1:].sum(axis=1).mean():.4f}")
    print("   n  k    C  optimum  greedy r  top-C conf  static conf  static opt  "
          "top-C loses  worst   top-C open")
    for row in table:
        print(f"{row['n']:4d} {row['k']:2d} {row['C']:4d}  {row['optimum']:.4f}   "
              f"{row['greedy_r']:.4f}    {row['topc_conf']:.4f}       {row['static_conf']:.4f}"
              f"      {row['static_opt']:.4f}   {row['topc_loses']:4d}/{row['batches']}"
              f"     {row['worst_loss']:.4f}  {row['topc_not_closed']:4d}")
    for kind in rankings:
        print(f"{kind}: n  k  top-C {kind}  static {kind}  beats static  beats top-C conf")
        for row in table:
            print(f"{row['n']:4d} {row['k']:2d}    {row[kind]:.4f}         "
                  f"{row[f'static_{kind}']:.4f}        {row[f'{kind}_beats_static']:4d}/"
                  f"{row['batches']}     {row[f'{kind}_beats_topc']:4d}/{row['batches']}")
    for n, t in timing.items():
        print(f"optimal_subtrees n={n} N={pred.size} C={3 * n}: {t:.0f} us per call")


if __name__ == "__main__":
    main()
