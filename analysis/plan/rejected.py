"""The planner's lists of what did not make the answer: every simulated configuration
compactly, the deployments shown to fail (rejected), and those not needed because the lower
bounds ruled out what was left there (dominated; analysis.plan.search)."""

from __future__ import annotations

from specbatch.analysis.plan.entry import Entry, Skipped
from specbatch.analysis.plan.space import Deployment


def configuration_dict(e: Entry) -> dict:
    """One simulated configuration, compactly: cost, verdict, latencies, preemptions; a run
    an early stop ended says when (``stopped_at``; its latencies are then lower bounds)."""
    lat = e.verdict.latency
    out = {"label": e.label, "cost": e.deployment.cost, "passed": e.verdict.passed,
           "limits": list(e.verdict.limits), "ttft": lat["ttft"], "tpot": lat["tpot"],
           "e2e": lat["e2e"], "preemptions": e.memory["preemptions"]}
    if e.stopped_at is not None:
        out["stopped_at"] = e.stopped_at
    return out


def rejected(entries: tuple[Entry, ...], skipped: tuple[Skipped, ...] = ()) -> list[dict]:
    """Every searched deployment on which no setting meets every limit, shown: each setting
    simulated and failing, or skipped because its bound cannot pass. With its best simulated
    setting's limits (fewest limits, then lowest e2e) and every setting's."""
    out = []
    for d, group, gone in _by_deployment(entries, skipped):
        if any(e.verdict.passed for e in group) or any(s.passes is None for s in gone):
            continue
        settings = {e.speculation.label: list(e.verdict.limits) for e in group}
        settings.update({s.speculation.label: [s.reason] for s in gone})
        if group:
            best = min(group, key=lambda e: (len(e.verdict.limits), e.verdict.latency["e2e"]))
            label, limits, memory = best.speculation.label, list(best.verdict.limits), best.memory
        else:
            label, limits, memory = gone[0].speculation.label, [gone[0].reason], None
        out.append({"deployment": d.label, "gpus": d.gpus, "cost": d.cost,
                    "best_setting": label, "limits": limits, "memory": memory,
                    "settings": dict(sorted(settings.items()))})
    return out


def dominated(entries: tuple[Entry, ...], skipped: tuple[Skipped, ...]) -> list[dict]:
    """Searched deployments without a passing simulated setting whose other settings were
    skipped as unable to beat the frontier (analysis.plan.search): not shown to fail, not
    needed for the answer (``--exhaustive`` simulates them)."""
    out = []
    for d, group, gone in _by_deployment(entries, skipped):
        if any(e.verdict.passed for e in group) or not any(s.passes is None for s in gone):
            continue
        out.append({"deployment": d.label, "gpus": d.gpus, "cost": d.cost,
                    "simulated": len(group), "skipped": len(gone),
                    "reason": next(s.reason for s in gone if s.passes is None)})
    return out


def _by_deployment(entries, skipped) -> list[tuple[Deployment, list[Entry], list[Skipped]]]:
    """(deployment, its entries, its skipped candidates), deployments in search order."""
    order: dict[Deployment, tuple[list, list]] = {}
    for e in entries:
        order.setdefault(e.deployment, ([], []))[0].append(e)
    for s in skipped:
        order.setdefault(s.deployment, ([], []))[1].append(s)
    return [(d, g, s) for d, (g, s) in order.items()]
