"""The planner's search: simulate the cost levels of a space, cheapest first, skip what a
lower bound proves cannot pass or cannot matter, and judge every run.

Each cost level (analysis.plan.space.cost_levels) holds its deployments x speculation
settings. With pruning on (the default) each candidate first gets its latency lower bound
(analysis.plan.bound, one set of shared tables per workload: trace, workload, fewest steps
per policy depth), then:

- **cannot pass**: a bound over an SLO at the percentile, or a goodput share under the
  target even at the bounds, proves the run would fail; it is not simulated;
- **cannot matter**: its e2e bound exceeds the e2e of a passing configuration ranked before
  it (cost, then GPUs no more than its own), so it can be neither the choice nor a point of
  the frontier (analysis.plan.entry.choose, pareto); it is not simulated. ``ar`` is not skipped
  this way unless a passing ``ar`` is ranked strictly before it (:func:`needed_ar`: the
  cheapest ``ar`` that passes is part of the answer);
- the rest run in rounds of :data:`ROUND` candidates in the order of their e2e bounds, the
  threshold tightening after each round, so the set simulated does not depend on the number
  of workers or the order runs finish in.

Each run of a pruned search carries a **stop rule** (analysis.plan.slo.EarlyStop, fixed when
its round starts): it ends as soon as what it simulated so far proves that it fails (a
preemption not allowed; enough requests over an SLO to fix its percentile above it; the
goodput share out of reach) or, for a setting that cannot matter otherwise, that its e2e at
the percentile exceeds the same threshold as above. A run stopped for failing is an entry
that fails, its latencies lower bounds; one stopped for the frontier is skipped. A run its
rule never stops is the whole run, bit for bit; ``ar`` on the chosen deployment is rerun
whole when it was stopped (its latencies are the gain's).

A level **adds to the frontier** when one of its passing runs beats every cheaper passing
run's e2e; the search stops once ``levels_after`` levels beyond the first passing level
have added to it. These rules only skip or stop runs that cannot change the choice, the
frontier or the levels searched, so the answer equals the exhaustive search's
(``prune=False``: every candidate of every searched level simulated whole), bit for bit
(tests/analysis/plan/test_search.py).

The runs themselves (stored, reused, on one pool of workers) are analysis.plan.runner's, and
what each is judged to be (an :class:`~analysis.plan.entry.Entry` or a
:class:`~analysis.plan.entry.Skipped` candidate) analysis.plan.entry's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from specbatch.analysis.plan.entry import Entry, Skipped, choose
from specbatch.analysis.plan.runner import Runner
from specbatch.analysis.plan.slo import Slos, StopRule
from specbatch.analysis.plan.space import Deployment, Space, Speculation, cost_levels, speculations

#: Candidates simulated per round between two updates of the pruning threshold.
ROUND = 4


@dataclass(frozen=True)
class Search:
    """Every judged entry and skipped candidate, in cost order, and the run counts."""

    entries: tuple[Entry, ...]
    levels: int  # cost levels searched
    runs: int  # simulated (computed now or reused)
    computed: int
    reused: int
    skipped: tuple[Skipped, ...] = ()
    stopped: int = 0  # runs an early stop ended (failing, or unable to beat the frontier)


def search(base: dict, space: Space, deployments: list[Deployment], slos: Slos,
           runs_dir: Path, levels_after: int = 1, prune: bool = True,
           **executor: Any) -> Search:
    """Search ``deployments`` (already pruned for memory) level by level (module docstring).

    base: SimConfig fields every run shares (seed included). executor: ``workers``,
    ``scheduler``, ``progress``.
    """
    from specbatch.analysis.plan.bound import BoundTables

    settings = speculations(space)
    runner = Runner(base, runs_dir, early=prune, **executor)
    tables = BoundTables(base, runner.trace) if prune else None
    entries: list[Entry] = []
    skipped: list[Skipped] = []
    added, levels = 0, 0
    all_levels = cost_levels(deployments)
    with runner:
        for _, level in all_levels:
            if added > levels_after:
                break
            runner.begin_level(levels + 1, len(all_levels), len(level) * len(settings))
            before = _best_e2e(entries)
            new, gone = search_level(runner, tables, level, settings, slos, entries)
            levels += 1
            entries += new
            skipped += gone
            added += any(e.verdict.passed and e.verdict.latency["e2e"] < before for e in new)
        ar_entry = complete_gain(runner, entries, space, slos)
        if ar_entry is not None:
            same = (ar_entry.deployment, ar_entry.speculation)
            entries = ([ar_entry if (e.deployment, e.speculation) == same else e
                        for e in entries] if any((e.deployment, e.speculation) == same
                                                 for e in entries) else entries + [ar_entry])
            skipped = [s for s in skipped if (s.deployment, s.speculation) != same]
    return Search(tuple(entries), levels, runner.runs, runner.computed, runner.reused,
                  tuple(skipped), runner.stopped)


def _best_e2e(entries: list[Entry]) -> float:
    """The lowest e2e at the percentile of the passing entries (inf: none passes)."""
    return min((e.verdict.latency["e2e"] for e in entries if e.verdict.passed),
               default=math.inf)


def search_level(runner: Runner, tables, level: list[Deployment], settings: list[Speculation],
                 slos: Slos, earlier: list[Entry]) -> tuple[list[Entry], list[Skipped]]:
    """Simulate one cost level's candidates, skipping what the bounds rule out (module
    docstring); returns its entries and skipped candidates in the level's order."""
    candidates = [(d, s) for d in level for s in settings]
    if tables is None:
        found = runner.run(candidates, slos)
        return [found[c] for c in candidates], []
    bounds = {c: tables.bounds(runner.fields(*c)) for c in candidates}
    skipped: dict = {}
    for c, b in bounds.items():
        why = None if b is None else cannot_pass(b, slos)
        if why is not None:
            skipped[c] = Skipped(*c, why, False)
    runner.drop(len(skipped))
    order = sorted((c for c in candidates if c not in skipped),
                   key=lambda c: (_e2e_bound(bounds[c], slos), candidates.index(c)))
    found: dict = {}
    while order:
        batch = []
        while order and len(batch) < ROUND:
            c = order.pop(0)
            why = cannot_matter(c, bounds[c], slos, earlier + list(found.values()))
            if why is None:
                batch.append(c)
            else:
                skipped[c] = Skipped(*c, why, None)
                runner.drop(1)
        ahead = earlier + list(found.values())
        rules = {c: stop_rule(c, slos, ahead) for c in batch}
        for c, got in runner.run(batch, slos, rules).items():
            (skipped if isinstance(got, Skipped) else found)[c] = got
    return ([found[c] for c in candidates if c in found],
            [skipped[c] for c in candidates if c in skipped])


def stop_rule(candidate: tuple[Deployment, Speculation], slos: Slos,
              entries: list[Entry]) -> StopRule:
    """The early stop of a candidate simulated now: its SLOs, and the e2e it must beat to
    matter (:func:`best_ahead`, fixed when its round starts, so what stops does not depend on
    the workers; none for ``ar``)."""
    best = None if needed_ar(candidate, entries) else best_ahead(candidate, entries)
    if best is None:
        return StopRule(slos)
    return StopRule(slos, best.verdict.latency["e2e"], best.label)


def needed_ar(candidate: tuple[Deployment, Speculation], entries: list[Entry]) -> bool:
    """Whether ``candidate`` is ``ar`` that may be the cheapest passing ``ar`` (part of the
    answer, analysis.plan.planner.gain_vs_ar): no passing ``ar`` is ranked strictly before it on
    (cost, GPUs). Such an ``ar`` is never skipped nor stopped for the frontier."""
    d, s = candidate
    return s.policy == "ar" and not any(
        e.verdict.passed and e.speculation.policy == "ar"
        and (e.deployment.cost, e.deployment.gpus) < (d.cost, d.gpus) for e in entries)


def best_ahead(candidate: tuple[Deployment, Speculation], entries: list[Entry]) -> Entry | None:
    """The passing entry ranked before ``candidate`` (cost, then GPUs, no more than its own)
    with the lowest e2e at the percentile, or None."""
    d = candidate[0]
    ahead = [e for e in entries if e.verdict.passed
             and (e.deployment.cost, e.deployment.gpus) <= (d.cost, d.gpus)]
    return min(ahead, key=lambda e: (e.verdict.latency["e2e"], e.label)) if ahead else None


def _e2e_bound(bounds, slos: Slos) -> float:
    return 0.0 if bounds is None else bounds.at(slos.percentile)["e2e"]


def cannot_pass(bounds, slos: Slos) -> str | None:
    """Why a run with these lower bounds must fail its SLOs, or None (module docstring)."""
    p = slos.percentile
    at = bounds.at(p)
    for name, bound in slos.bounds().items():
        if at[name] > bound:
            return (f"cannot pass: {name.upper()} p{p:g} >= {at[name]:.3g} s (lower bound) > "
                    f"{bound:g} s")
    if slos.bounds():
        ok = np.ones(bounds.e2e.shape[0], dtype=bool)
        for name, bound in slos.bounds().items():
            ok &= getattr(bounds, name) <= bound
        share = float(ok.mean()) if ok.size else 0.0
        if share < slos.goodput:
            return f"cannot pass: goodput <= {share:.3f} (lower bounds) < {slos.goodput:g}"
    return None


def cannot_matter(candidate: tuple[Deployment, Speculation], bounds, slos: Slos,
                  entries: list[Entry]) -> str | None:
    """Why ``candidate`` can be neither the choice nor a frontier point, or None: its e2e
    bound exceeds a passing entry's e2e ranked before it (module docstring)."""
    if bounds is None or needed_ar(candidate, entries):
        return None
    best = best_ahead(candidate, entries)
    if best is None:
        return None
    lower = bounds.at(slos.percentile)["e2e"]
    if lower > best.verdict.latency["e2e"]:
        return (f"cannot beat the frontier: e2e p{slos.percentile:g} >= {lower:.3g} s (lower "
                f"bound) > {best.verdict.latency['e2e']:.3g} s of {best.label}")
    return None


def complete_gain(runner: Runner, entries: list[Entry], space: Space,
                  slos: Slos) -> Entry | None:
    """``ar`` on the choice's deployment when it was skipped or stopped early (the gain over
    ``ar`` on the same GPUs is part of the answer: its whole run), simulated now; None when
    not needed."""
    choice = choose(tuple(entries))
    if choice is None or choice.speculation.policy == "ar" or "ar" not in space.policies:
        return None
    if any(e.deployment == choice.deployment and e.speculation.policy == "ar"
           and e.stopped_at is None for e in entries):
        return None
    c = (choice.deployment, Speculation("ar"))
    runner.drop(-1)  # one run more than the levels left
    return runner.run([c], slos)[c]
