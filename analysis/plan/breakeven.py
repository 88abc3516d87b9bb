"""Break-even acceptance: how much worse acceptance may be before a setting stops beating ar.

For each speculating setting of the tie set (analysis.plan.seeds) on the chosen deployment,
the acceptance is a one-parameter family: the run's profile (``--acceptance-profile``, or the
trace's pooled TV law, traces.acceptance.from_trace) with every conditional rate scaled by
``x`` (traces.acceptance.profile.scaled; the histogram dropped, the chain kept). With the
first seed (common random numbers), the gain over ar ``g(x) = 1 − e2e(x) / e2e_ar`` (e2e at
the SLO percentile) is bisected on ``x ∈ [0, 1]`` for ``g = 0``, :data:`STEPS` halvings
(width 2^-STEPS), assuming g grows with x (more acceptance, fewer steps). Reported: the
scale x*, the mean accepted length at the setting's window that it gives, and a_1. A setting
that does not beat ar at x = 1 has no break-even below the measured acceptance (``None``).
Beating ar means meeting every limit with a lower e2e; each run stops as soon as it is proven
not to (analysis.plan.slo.EarlyStop with ar's e2e as the bar), which is all the bisection
reads. ar's run does not depend on acceptance. The scaled profiles are
written under ``OUT/acceptance/`` (the runs' inputs, hashed into their keys).

:func:`bundled_band` asks the same question across published acceptance: the tied settings
and ar under the bundled profiles of the asked drafter kind (traces.acceptance.library) with
the lowest and highest MAL at their K.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from specbatch.analysis.plan.entry import Entry
from specbatch.analysis.plan.runner import Runner
from specbatch.analysis.plan.slo import StopRule
from specbatch.analysis.plan.space import Speculation

if TYPE_CHECKING:
    from specbatch.analysis.plan.planner import Answer, Question

#: Bisection halvings (the break-even scale to within 2^-STEPS).
STEPS = 4


def base_profile(base: dict):
    """The profile the family scales: the run's own, or the trace's pooled law."""
    from specbatch.simulator.config.sim_config import make_config
    from specbatch.simulator.run import applied_profile, load_trace
    from specbatch.traces.acceptance.from_trace import profile_from_trace

    config = make_config(base)
    profile = applied_profile(config)
    return profile if profile is not None else profile_from_trace(load_trace(config))


def breakeven_report(base: dict, question: Question, main: Answer, out: Path,
                     **executor: Any) -> dict:
    """``{"method", "profile", "settings": [{label, scale, mal_at_k, a1}]}`` (module doc)."""
    from specbatch.traces.acceptance.profile import mean_accepted_length, scaled, write_profile

    profile = base_profile(base)
    unc = main.report.get("uncertainty") or {}
    deployment = main.choice.deployment
    labels = unc.get("tie_set") or [main.choice.speculation.label]
    specs = {s.label: s for s in _settings(question) if s.label in labels and s.policy != "ar"}
    report = {"method": f"bisection of the gain over ar on the scale x of every a_j, "
                        f"{STEPS} halvings, seed {base.get('seed', 0)}",
              "profile": profile.source, "settings": []}
    if not specs or "ar" not in question.space.policies:
        return report
    if base.get("trace") == "synth":  # a synthetic trace's requests depend on its knobs
        report["note"] = "not computed on a synthetic trace (give a trace or a profile)"
        return report
    folder = out / "acceptance"
    folder.mkdir(parents=True, exist_ok=True)

    def beats(x: float, todo: list[Speculation], ar_e2e: float | None) -> dict[str, float]:
        """e2e of each setting at scale x; with ``ar_e2e``, runs stop once they cannot
        beat it or fail a limit (inf then: the answer is only whether they beat ar)."""
        path = folder / f"scale-{x:.6f}.json"
        if not path.exists():
            write_profile(scaled(profile, x), path)
        fields = {**base, "acceptance_profile": str(path)}
        runner = Runner(fields, out / "runs" / "breakeven", early=ar_e2e is not None,
                        **executor)
        cands = [(deployment, s) for s in todo]
        rules = None if ar_e2e is None else {c: StopRule(question.slos, ar_e2e, "ar")
                                             for c in cands}
        with runner:
            found = runner.run(cands, question.slos, rules)
        out_ = {}
        for c in cands:
            got = found[c]
            whole = isinstance(got, Entry) and got.verdict.passed and got.stopped_at is None
            out_[c[1].label] = got.verdict.latency["e2e"] if whole else float("inf")
        return out_

    ar_e2e = beats(1.0, [Speculation("ar")], None)["ar"]
    at_one = beats(1.0, list(specs.values()), ar_e2e)
    lo = {k: 0.0 for k in specs}
    hi = {k: 1.0 for k in specs}
    live = [k for k in specs if at_one[k] < ar_e2e]
    for _ in range(STEPS):
        by_x: dict[float, list[str]] = {}
        for k in live:
            by_x.setdefault((lo[k] + hi[k]) / 2, []).append(k)
        for x, names in by_x.items():
            got = beats(x, [specs[k] for k in names], ar_e2e)
            for k in names:
                (hi if got[k] < ar_e2e else lo)[k] = x
    for label, s in specs.items():
        if label not in live:
            report["settings"].append({"label": label, "scale": None, "mal_at_k": None,
                                       "a1": None, "note": "does not beat ar at the "
                                       "measured acceptance"})
            continue
        x = hi[label]
        p = scaled(profile, x)
        k = min(p.K, (s.k or p.K) + s.extra)
        report["settings"].append({"label": label, "scale": x, "scale_low": lo[label],
                                   "mal_at_k": mean_accepted_length(p, k), "k": k,
                                   "a1": p.rates[0],
                                   "mal_measured": mean_accepted_length(profile, k)})
    return report


def _settings(question: Question) -> list[Speculation]:
    from specbatch.analysis.plan.space import speculations

    return speculations(question.space)


def drafter_kind(draft: str) -> str:
    """The bundled library's drafter kind of an asked draft: a head or ngram by name, else a
    draft model."""
    from specbatch.simulator.defaults import FREE_DRAFTS, HEAD_DRAFTS

    name = str(draft).lower()
    return name if name in HEAD_DRAFTS + FREE_DRAFTS else "draft-model"


def bundled_band(base: dict, question: Question, main: Answer, out: Path,
                 **executor: Any) -> dict:
    """The chosen deployment's tied settings and ar under the bundled published profiles of
    the asked drafter kind with the lowest and the highest MAL at their K (first seed, whole
    runs; settings deeper than a profile's K are left out): which setting is best at each end
    and its gain over ar. ``{"kind", "ends": [...]}``; no ends when none is bundled."""
    from specbatch.traces.acceptance.library import bundled_names, load_bundled, profile_path
    from specbatch.traces.acceptance.profile import mean_accepted_length

    kind = drafter_kind(base["draft"])
    found = [(mean_accepted_length(p), n, p) for n in bundled_names()
             if (p := load_bundled(n)).drafter == kind]
    report: dict = {"kind": kind, "ends": []}
    if not found or base.get("trace") == "synth":
        report["note"] = (f"no bundled {kind} profile" if not found
                          else "not computed on a synthetic trace")
        return report
    found.sort(key=lambda t: (t[0], t[1]))
    unc = main.report.get("uncertainty") or {}
    labels = set(unc.get("tie_set") or [main.choice.speculation.label]) | {"ar"}
    specs = [s for s in _settings(question) if s.label in labels]
    deployment = main.choice.deployment
    for mal, name, profile in [found[0]] + ([found[-1]] if len(found) > 1 else []):
        fit = [s for s in specs if (s.k or 0) + s.extra <= profile.K]
        runner = Runner({**base, "acceptance_profile": str(profile_path(name))},
                        out / "runs" / "band", early=False, **executor)
        with runner:
            got = runner.run([(deployment, s) for s in fit], question.slos)
        e2e = {s.label: got[(deployment, s)].verdict.latency["e2e"] for s in fit
               if got[(deployment, s)].verdict.passed}
        best = min(e2e, key=lambda k: (e2e[k], k)) if e2e else None
        gain = (100.0 * (1 - e2e[best] / e2e["ar"]) if best is not None and "ar" in e2e
                else None)
        report["ends"].append({"profile": name, "mal": mal, "K": profile.K, "pair": profile.pair,
                               "best": best, "gain_pct": gain,
                               "compared": [s.label for s in fit]})
    return report
