"""Speculation under load, per drafter: the table of docs/simulate.md ("Speculation under load").

Llama-3.2-1B (constant α = 0.7) and the n-gram proposer (α = 0.3) drafting for Llama-3.1-8B on
one H100: the synthetic trace (``trace = "synth"``: lognormal prompts of mean 256 and outputs
of mean 128), 1,000 requests, ``max_num_seqs`` 256, ``max_num_batched_tokens`` 8192, paged KV,
vLLM's host terms (``host = "vllm"``), ``fixed`` k = 3 and 5, under the roofline and the
default cost model (``auto``). For each Poisson rate it prints the TPOT speedup, the ``ar`` run's
mean TPOT over the speculative run's (each ``ar`` run is the same deployment without a
speculative config: the same drafter and α, ``policy = "ar"``), then the saturated throughput
ratio (``arrival = "burst"``, speculative / ``ar``).

``--async-scheduling`` is each run's ``async_scheduling`` (default ``auto``: vLLM's rule for the
flag unset, resolved per run, so the ``ar`` runs and the 1B runs overlap the host and the
n-gram runs do not; simulator.cost.features.async_overhead). Simulated numbers from assumed
acceptance and lengths; nothing is fitted to a measured speedup.

    .venv/bin/python benchmarks/drafters_under_load.py [--async-scheduling auto|true|false]
        [--rates 5,40,60,70] [--costs roofline,auto] [--json]
"""

from __future__ import annotations

import argparse
import json

from specbatch.simulator.config.sim_config import load_config
from specbatch.simulator.run import simulate

#: The deployment every run shares (docs/simulate.md).
BASE = {"trace": "synth", "requests": 1000, "max_num_seqs": 256,
        "max_num_batched_tokens": 8192, "kv_mode": "paged", "host": "vllm",
        "hardware": "h100", "target": "llama-3.1-8b"}
#: The table's columns: (label, drafter, constant α, k).
COLUMNS = (("1B k = 3", "llama-3.2-1b", 0.7, 3), ("1B k = 5", "llama-3.2-1b", 0.7, 5),
           ("ngram k = 3", "ngram", 0.3, 3), ("ngram k = 5", "ngram", 0.3, 5))
#: The saturation ratios printed (the columns' labels).
SATURATED = ("1B k = 3", "1B k = 5", "ngram k = 3")


def run(cost: str, asked, draft: str, alpha: float, policy: str, k: int | None, **load):
    """One simulation's summary."""
    fields = {**BASE, "cost": cost, "async_scheduling": asked, "draft": draft,
              "synth_alpha": alpha, "policy": policy, **load}
    if k is not None:
        fields["num_speculative_tokens"] = k
    return simulate(load_config(None, **fields)).summary


def table(costs, rates, asked) -> dict:
    """{cost: {"tpot": {rate: {label: speedup}}, "saturated": {label: ratio},
    "ar_tokens_per_s": tok/s of ar at burst, "async": {label: how it resolved}}}."""
    out: dict = {}
    for cost in costs:
        res: dict = {"tpot": {}, "saturated": {}, "async": {}}
        for rate in rates:
            row = {}
            for label, draft, alpha, k in COLUMNS:
                load = {"arrival": "poisson", "rate": float(rate)}
                ar = run(cost, asked, draft, alpha, "ar", None, **load)
                spec = run(cost, asked, draft, alpha, "fixed", k, **load)
                row[label] = ar["tpot_mean"] / spec["tpot_mean"]
                res["async"][label] = spec["async_scheduling"]
                res["async"]["ar"] = ar["async_scheduling"]
            res["tpot"][rate] = row
        for label, draft, alpha, k in COLUMNS:
            if label not in SATURATED:
                continue
            ar = run(cost, asked, draft, alpha, "ar", None, arrival="burst")
            spec = run(cost, asked, draft, alpha, "fixed", k, arrival="burst")
            res["saturated"][label] = spec["throughput"] / ar["throughput"]
            res["ar_tokens_per_s"] = ar["throughput"]
        out[cost] = res
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--async-scheduling", default="auto", choices=("auto", "true", "false"))
    p.add_argument("--rates", default="5,40,60,70")
    p.add_argument("--costs", default="roofline,auto")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    asked = {"true": True, "false": False}.get(args.async_scheduling, "auto")
    rates = [float(r) for r in args.rates.split(",")]
    result = table(args.costs.split(","), rates, asked)
    if args.json:
        print(json.dumps(result, indent=1))
        return
    labels = [c[0] for c in COLUMNS]
    print(f"async_scheduling = {args.async_scheduling}")
    print("| cost | rate (req/s) | " + " | ".join(labels) + " |")
    print("|---|---|" + "---|" * len(labels))
    for cost, res in result.items():
        for rate, row in res["tpot"].items():
            print(f"| {cost} | {rate:g} | " + " | ".join(f"{row[x]:.2f}" for x in labels) + " |")
    for cost, res in result.items():
        sat = ", ".join(f"{label} {v:.3f}" for label, v in res["saturated"].items())
        print(f"{cost}: saturated (burst) speculative / ar: {sat}; ar {res['ar_tokens_per_s']:,.0f}"
              " tok/s")
        print(f"{cost}: async scheduling: " + "; ".join(f"{k}: {v}"
                                                        for k, v in res["async"].items()))


if __name__ == "__main__":
    main()
