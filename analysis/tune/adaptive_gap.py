"""How far vLLM's adaptive verification is from the per-step optimum, and what each of its
shortcuts costs (issue 36 §2; docs/policies.md, "vLLM's adaptive verification").

For every bundled real chain trace, batch cap ``max_num_seqs``, load and seed, the arms below
run on one paired replay set (``calibration_split = 0.25`` for all, common random numbers):

- ``vllm-adaptive`` as vLLM ships it (stale confidences, profiled tables, raw confidence), then
  one shortcut switched off at a time, cumulatively: fresh confidences; exact step costs;
  calibrated survival (``--predictor learned``); exact ``P_ij`` (``adaptive_survival = truth``:
  with the two before, the per-step optimum of THEORY.md §7 with the simulator's own cost,
  under TV);
- ``tetris`` (fixed C = k·n, K = k + e drafted; best of k = 1, 2, 3), the same with the learned
  predictor, ``dsd``, and the best fixed k (k = 1..K).

Loads: ``burst`` (2·max_num_seqs requests at t = 0, scored by throughput) and ``poisson``
(the same requests at 70 % of autoregressive decoding's burst throughput at that cap, scored
by mean end-to-end latency). Every number is relative to the best fixed k of its cell:
throughput ratio − 1, or best fixed latency / latency − 1 (positive = better).

The attribution is the sequence of differences: staleness (fresh − shipped), the stepped cost
tables (exact − fresh), calibration (learned − exact), the remaining estimate error (optimum −
learned), and the B rule against a fixed budget (shipped − best TETRIS, same raw confidences).

Run: ``python -m specbatch.analysis.tune.adaptive_gap [--quick] [--seeds N] [--jobs N]
[--figure PATH] [--json]`` (several seeds: each seed's cell is paired within itself, the
table shows the means over seeds).
"""

from __future__ import annotations

import argparse
import json
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

#: The bundled chain traces of the real SmolLM2 target with a model draft.
TRACES = ("smollm2", "smollm2-drop2", "smollm2-drop4")
#: Batch caps (max_num_seqs).
SIZES = (1, 4, 16, 64, 256)
#: Draft depth of the adaptive arms (DSpark's blog runs K = 7; the traces hold K = 8).
DEPTH = 6
#: Loads: the arrival process of each.
LOADS = ("burst", "poisson")
#: Poisson rate as a fraction of ar's burst throughput at the same cap.
LOAD_FRACTION = 0.7
BASE = {"cost": "roofline", "hardware": "h100", "target": "vicuna-33b", "draft": "vicuna-68m",
        "verify": "token", "calibration_split": 0.25, "seed": 0}
FRESH = {"adaptive_confidences": "fresh"}
EXACT = {**FRESH, "adaptive_cost_tables": "exact"}
ADAPTIVE = {"policy": "vllm-adaptive", "num_speculative_tokens": DEPTH}

#: (arm, overrides) of the adaptive chain, in the order the attribution subtracts them.
CHAIN = (
    ("vllm-adaptive", ADAPTIVE),
    ("+ fresh", {**ADAPTIVE, **FRESH}),
    ("+ exact cost", {**ADAPTIVE, **EXACT}),
    ("+ calibrated", {**ADAPTIVE, **EXACT, "predictor": "learned"}),
    ("optimum", {**ADAPTIVE, **EXACT, "adaptive_survival": "truth"}),
)


def family(name: str) -> list[tuple[str, dict]]:
    """The runs of a family whose best member is reported."""
    if name == "fixed":
        return [(f"fixed k={k}", {"policy": "fixed", "num_speculative_tokens": k})
                for k in range(1, DEPTH + 1)]
    predictor = {"predictor": "learned"} if name == "tetris learned" else {}
    return [(f"{name} k={k}", {"policy": "tetris", "num_speculative_tokens": k,
                               "extra": DEPTH - k, **predictor}) for k in (1, 2, 3)]


FAMILIES = ("fixed", "tetris", "tetris learned")
COLUMNS = [arm for arm, _ in CHAIN] + ["tetris", "tetris learned", "dsd"]


@dataclass(frozen=True)
class Cell:
    trace: str
    size: int
    load: str
    seed: int = 0


def run_one(settings: dict) -> dict:
    """One simulation's summary (a worker process's job; each process reads a trace once)."""
    from specbatch.analysis.tune.tuner import simulate_fields

    return simulate_fields(settings)


def cell_settings(cell: Cell, rate: float | None) -> dict:
    out = {**BASE, "seed": cell.seed, "trace": cell.trace, "max_num_seqs": cell.size,
           "requests": max(32, 2 * cell.size), "arrival": cell.load}
    if cell.load == "poisson":
        out["rate"] = rate
    return out


def score(summary: dict, load: str) -> float:
    """Higher is better: throughput (burst) or 1 / mean e2e latency (poisson)."""
    return summary["throughput"] if load == "burst" else 1.0 / summary["e2e_mean"]


def runs_of_cell(cell: Cell, rate: float | None) -> list[tuple[str, dict]]:
    base = cell_settings(cell, rate)
    arms = [(arm, {**base, **o}) for arm, o in CHAIN]
    arms += [(f"{fam}|{label}", {**base, **o}) for fam in FAMILIES for label, o in family(fam)]
    arms.append(("dsd", {**base, "policy": "dsd"}))
    return arms


def ar_rate(cell: Cell) -> float:
    """The poisson rate: LOAD_FRACTION × ar's burst throughput / mean output tokens."""
    summary = run_one({**cell_settings(Cell(cell.trace, cell.size, "burst", cell.seed), None),
                       "policy": "ar"})
    return LOAD_FRACTION * summary["throughput"] / (summary["tokens"] / summary["requests"])


def evaluate(cells: list[Cell], jobs: int) -> list[dict]:
    """Every arm of every cell, relative to its cell's best fixed k (module docstring)."""
    pool = ProcessPoolExecutor(jobs) if jobs > 1 else None
    mapper = pool.map if pool else map
    poisson = [c for c in cells if c.load == "poisson"]
    rates = dict(zip(poisson, mapper(ar_rate, poisson)))
    plan = [(cell, arm, s) for cell in cells for arm, s in runs_of_cell(cell, rates.get(cell))]
    summaries = list(mapper(run_one, [s for _, _, s in plan]))
    if pool:
        pool.shutdown()
    rows = []
    for cell in cells:
        got = {arm: score(summ, cell.load) for (c, arm, _), summ in zip(plan, summaries)
               if c == cell}
        best = {fam: max((v, a.split("|")[1]) for a, v in got.items()
                         if a.startswith(fam + "|")) for fam in FAMILIES}
        ref = best["fixed"][0]
        row = {"trace": cell.trace, "max_num_seqs": cell.size, "load": cell.load,
               "seed": cell.seed, "best_fixed": best["fixed"][1]}
        for arm, _ in CHAIN:
            row[arm] = 100 * (got[arm] / ref - 1)
        for fam in ("tetris", "tetris learned"):
            row[fam] = 100 * (best[fam][0] / ref - 1)
        row["dsd"] = 100 * (got["dsd"] / ref - 1)
        rows.append(row)
    return rows


def average(rows: list[dict]) -> list[dict]:
    """Rows of the same trace, cap and load averaged over seeds (each seed's numbers are
    paired within the seed); ``best_fixed`` lists each seed's best k, ``seeds`` counts them."""
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        groups.setdefault((row["trace"], row["max_num_seqs"], row["load"]), []).append(row)
    out = []
    for (trace, size, load), group in groups.items():
        mean = {c: sum(r[c] for r in group) / len(group) for c in COLUMNS}
        ks = "/".join(r["best_fixed"].split("=")[1] for r in group)
        out.append({"trace": trace, "max_num_seqs": size, "load": load, "seeds": len(group),
                    "best_fixed": f"fixed k={ks}", **mean})
    return out


def attribution(row: dict) -> dict:
    """The gap of the shipped rule to the optimum, split into its sources (percentage points
    of the best fixed k's score)."""
    return {"staleness": row["+ fresh"] - row["vllm-adaptive"],
            "stepped cost": row["+ exact cost"] - row["+ fresh"],
            "calibration": row["+ calibrated"] - row["+ exact cost"],
            "estimates": row["optimum"] - row["+ calibrated"],
            "B rule vs fixed C": row["vllm-adaptive"] - row["tetris"]}


def table(rows: list[dict]) -> str:
    """Markdown: each arm vs the best fixed k (%), and the attribution (points)."""
    keys = list(attribution(rows[0]))
    head = ["trace", "cap", "load", "best k"] + COLUMNS + keys
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        parts = attribution(row)
        values = [f"{row[c]:+.1f}" for c in COLUMNS] + [f"{parts[k]:+.1f}" for k in keys]
        lines.append("| " + " | ".join([row["trace"], str(row["max_num_seqs"]), row["load"],
                                        row["best_fixed"].split("=")[1]] + values) + " |")
    return "\n".join(lines)


def figure(rows: list[dict], path: str) -> None:
    """Each arm vs the best fixed k against the batch cap, one panel per load (mean over the
    traces)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(LOADS), figsize=(11, 4), sharey=True)
    for ax, load in zip(axes, LOADS):
        sub = [r for r in rows if r["load"] == load]
        sizes = sorted({r["max_num_seqs"] for r in sub})
        for column in COLUMNS:
            mean = [sum(r[column] for r in sub if r["max_num_seqs"] == s)
                    / max(1, sum(r["max_num_seqs"] == s for r in sub)) for s in sizes]
            ax.plot(sizes, mean, marker="o", label=column,
                    linestyle="-" if column in dict(CHAIN) else "--")
        ax.axhline(0, color="0.5", linewidth=0.8)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("max_num_seqs")
        ax.set_title(f"{load}: " + ("throughput" if load == "burst" else "1 / mean latency"))
    axes[0].set_ylabel("% vs best fixed k (mean over traces)")
    axes[-1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m specbatch.analysis.tune.adaptive_gap",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="one trace, caps 1 and 16")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes")
    parser.add_argument("--figure", help="write the figure (PNG) here")
    parser.add_argument("--seeds", type=int, default=1, help="seeds 0..N-1 (default 1)")
    parser.add_argument("--json", action="store_true",
                        help="print the per-seed rows and their means as one JSON object")
    args = parser.parse_args(argv)
    traces, sizes = (TRACES[:1], (1, 16)) if args.quick else (TRACES, SIZES)
    cells = [Cell(t, s, load, seed) for seed in range(args.seeds) for t in traces
             for s in sizes for load in LOADS]
    rows = evaluate(cells, args.jobs)
    mean = average(rows)
    if args.figure:
        figure(mean, args.figure)
    if args.json:
        json.dump({"rows": rows, "mean": mean}, sys.stdout)
        print()
    else:
        print(table(mean))
    return 0


if __name__ == "__main__":
    sys.exit(main())
