"""The planner's answer over several seeds: paired intervals and a tie set (THEORY.md §14).

One seed's search picks the cheapest deployment meeting every SLO and, on it, the setting of
lowest e2e at the percentile; on another seed the setting can differ (the workload's arrivals
and the verifier's uniforms change). So on the chosen deployment every searched setting is
simulated whole on R seeds (``seed, seed + 1, ..``; common random numbers: every setting of
a seed sees the same arrivals and uniforms; the first seed's whole runs are reused from the
search), and each setting's **gain** on seed r is

    g_r = 100 · (1 − e2e_r(setting) / e2e_r(ar))      (e2e at the SLO percentile, %)

A setting is a candidate when it meets every limit on every seed. The best candidate has the
highest mean gain; the **tie set** is every candidate whose paired interval against it
contains 0 (analysis.report.ties). When ``ar`` is in the tie set, speculation's gain is not
resolved and the answer is ``ar`` (the simpler setting); otherwise the answer is the best.
The deployment, frontier and rejected tables stay the first seed's search. Without ``ar``
in the search the metric is the e2e itself (``gain`` is then null and ties compare
``−e2e`` in ms).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specbatch.analysis.plan.entry import Entry
from specbatch.analysis.plan.runner import Runner
from specbatch.analysis.plan.space import Speculation, speculations
from specbatch.analysis.report.ties import interval, paired, tie_set

if TYPE_CHECKING:
    from specbatch.analysis.plan.planner import Answer, Question


def seed_runs(base: dict, question: Question, choice: Entry, runs_dir: Path,
              **executor: Any) -> dict[int, dict[Speculation, Entry]]:
    """seed -> setting -> whole-run entry on the choice's deployment, for R seeds."""
    first = int(base.get("seed", 0))
    settings = speculations(question.space)
    out = {}
    for seed in range(first, first + question.seeds):
        runner = Runner({**base, "seed": seed}, runs_dir, early=False, **executor)
        with runner:
            found = runner.run([(choice.deployment, s) for s in settings], question.slos)
        out[seed] = {s: found[(choice.deployment, s)] for s in settings}
    return out


def seed_check(base: dict, question: Question, main: Answer, runs_dir: Path,
               **executor: Any) -> Answer:
    """``main`` with ``report["uncertainty"]`` and, when the tie set says so, the choice's
    setting replaced by the answer over the seeds (module docstring)."""
    from specbatch.analysis.plan.planner import choice_dict

    runs = seed_runs(base, question, main.choice, runs_dir, **executor)
    seeds = sorted(runs)
    settings = list(runs[seeds[0]])
    ar = next((s for s in settings if s.policy == "ar"), None)
    passing = [s for s in settings if all(runs[r][s].verdict.passed for r in seeds)]

    def e2e(s, r):
        return runs[r][s].verdict.latency["e2e"]

    if ar is not None:
        values = {s.label: [100.0 * (1.0 - e2e(s, r) / e2e(ar, r)) for r in seeds]
                  for s in passing}
    else:
        values = {s.label: [-1000.0 * e2e(s, r) for r in seeds] for s in passing}
    by_label = {s.label: s for s in settings}
    report = main.report
    unc: dict = {"seeds": seeds, "deployment": main.choice.deployment.label,
                 "metric": (f"gain: e2e p{question.slos.percentile:g} % lower than ar on "
                            "the same deployment and seed" if ar is not None else
                            f"-e2e p{question.slos.percentile:g} in ms (ar not searched)"),
                 "candidates": [], "failing": [s.label for s in settings if s not in passing]}
    if not values:  # nothing passes on every seed: the first seed's choice, said so
        unc.update(best=None, tie_set=[], answer=main.choice.speculation.label,
                   reason="no setting meets every limit on every seed")
        report["uncertainty"] = unc
        return main
    best, ties = tie_set(values)
    for label, v in values.items():
        per_seed_best = [r for i, r in enumerate(seeds)
                         if v[i] == max(w[i] for w in values.values())]
        unc["candidates"].append({
            "label": label, "values": v,
            "gain": interval(v).as_dict() if ar is not None else None,
            "vs_best": paired(v, values[best]).as_dict(), "best_on_seeds": per_seed_best,
            "tied": label in ties})
    answer = "ar" if ar is not None and "ar" in ties else best
    unc.update(best=best, tie_set=ties, answer=answer,
               reason=("ar is in the tie set: speculation's gain is not resolved over "
                       f"{len(seeds)} seeds" if answer == "ar" and best != "ar" else
                       f"highest mean over {len(seeds)} seeds"))
    report["uncertainty"] = unc
    chosen = runs[seeds[0]][by_label[answer]]
    if answer != main.choice.speculation.label:
        entries = tuple(main.search.entries) + tuple(runs[seeds[0]].values())
        report["choice"] = choice_dict(chosen, entries)
        report["choice"]["replaces"] = main.choice.label
        main = dataclasses.replace(main, choice=chosen)
    if ar is not None:
        report["choice"]["gain"] = interval(values[answer]).as_dict()
    report["choice"]["tie_set"] = ties
    return main
