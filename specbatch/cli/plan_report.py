"""The text of ``specbatch plan``'s answer: the chosen deployment and its gain over ``ar`` with
its uncertainty (seeds, paired intervals, the tie set), where its acceptance came from, the
cost-latency frontier, and what limits each rejected or pruned deployment."""

from __future__ import annotations


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g} s"


def format_report(report: dict) -> str:
    """The answer in a few lines, then the frontier, rejected and pruned deployments."""
    q, acc, choice = report["question"], report["acceptance"], report["choice"]
    load = f"Poisson {q['rate']:g} req/s" if q.get("arrival") == "poisson" else \
        f"{q.get('arrival')} arrivals"
    lines = [f"question: {q['target']} + draft {q['draft']}, {load}, {q['requests']} "
             f"requests; {q['slos']}"]
    from specbatch.simulator.replay.acceptance_source import source_line

    lines.append(f"{source_line(acc)}; {acc['wrapped_positions']:,} of "
                 f"{acc['output_positions']:,} output positions wrapped past the recorded "
                 f"outputs ({acc['wrapped_requests']} requests)")
    if choice is None:
        lines.append("answer: no searched configuration meets every limit (see rejected; "
                     "raise --max-gpus or relax the SLOs)")
    else:
        lat, mem = choice["latency"], choice["memory"]
        lines.append(f"answer: {choice['label']}  (cost {choice['cost']:g})")
        lines.append(f"  latency at the percentile: TTFT {_seconds(lat['ttft'])}, TPOT "
                     f"{_seconds(lat['tpot'])}, e2e {_seconds(lat['e2e'])}; goodput "
                     f"{lat['goodput']:.3f}")
        lines.append(f"  memory per replica ({choice['tp']} GPU{'s' if choice['tp'] > 1 else ''}): "
                     f"weights {mem['weights_gb']:g} GB; KV needed "
                     f"{mem['kv_needed_tokens']:,} tokens ({mem['concurrency']} concurrent x "
                     f"{mem['footprint_tokens']:g}) of {mem['kv_available_tokens']:,} available; "
                     f"{mem['preemptions']} preemptions")
        gain = choice.get("gain_vs_ar")
        if gain is None and choice["policy"] != "ar":
            lines.append("  ar was not searched (add it to --policies for the gain)")
        if gain:
            if "tpot_ratio" in gain:
                lines.append(f"  vs ar on the same GPUs: TPOT {gain['tpot_ratio']:.2f}x "
                             f"lower, e2e {gain['e2e_ratio']:.2f}x lower; ar there: "
                             f"{'; '.join(gain['ar_limits']) or 'meets every limit too'}")
            lines.append(f"  cheapest ar that meets every limit: "
                         f"{gain['cheapest_ar'] or 'none within the searched levels'}")
        if choice.get("async_scheduling"):  # as resolved (SimConfig.async_setting)
            lines.append(f"  async scheduling: {choice['async_scheduling']}")
        lines.append(f"  re-run it: {choice['simulate']}")
        for engine, line in choice.get("engines", {}).items():
            lines.append(f"  {engine}: {line}")
        if choice.get("engines_checked_against"):
            lines.append(f"  (checked against {choice['engines_checked_against']})")
        lines += uncertainty_lines(report)
    if report["pareto"]:
        lines.append("frontier (cost vs e2e at the percentile):")
        lines += [f"  {e['cost']:>6g}  {_seconds(e['latency']['e2e']):>9}  {e['label']}"
                  for e in report["pareto"]]
    if report["rejected"]:
        lines.append("rejected (best setting's limits):")
        lines += [f"  {r['deployment']}: {'; '.join(r['limits'])}" + _kv_note(r["memory"])
                  for r in report["rejected"]]
    if report.get("dominated"):
        lines.append("not needed (every setting there fails or cannot beat the frontier; "
                     "--exhaustive simulates them):")
        lines += [f"  {r['deployment']}: {r['reason']}" for r in report["dominated"]]
    if report["pruned"]:
        lines.append("pruned before simulating:")
        lines += [f"  {r['deployment']}: {r['limit']}" for r in report["pruned"]]
    for band in report.get("acceptance_band", []):
        lat = band["latency"]
        lines.append(f"constant alpha {band['alpha']:g}: "
                     + (f"{band['choice']} (TPOT {_seconds(lat['tpot'])}, e2e "
                        f"{_seconds(lat['e2e'])})" if lat else "nothing meets every limit"))
    if report.get("cost_source"):
        from specbatch.simulator.cost.report import source_line

        src = report["cost_source"]
        lines.append(f"cost model {src['cost']['ran']} on {src['hardware']} tp {src['tp']}: "
                     f"{source_line(src)}")
    s = report["searched"]
    skipped = f", {s['skipped']} skipped by lower bounds" if s.get("skipped") else ""
    if s.get("stopped"):
        skipped += f", {s['stopped']} stopped early once their verdict was certain"
    lines.append(f"searched {s['runs']} runs in {s['levels']} cost levels ({s['computed']} "
                 f"computed, {s['reused']} reused{skipped}); written to {report['out']}"
                 + (f"; figure: {report['figure']}" if report["figure"] else "; no figure"))
    return "\n".join(lines)


def uncertainty_lines(report: dict) -> list[str]:
    """The answer over the seeds (analysis.plan.seeds) and the break-even acceptance."""
    from specbatch.analysis.report.ties import Interval, tie_text

    unc = report.get("uncertainty")
    if not unc:
        return []
    lines = [f"  over seeds {', '.join(map(str, unc['seeds']))} on {unc['deployment']} "
             f"({unc['metric']}):"]
    if unc.get("best") is None:
        return lines + [f"    {unc['reason']}"]
    for c in sorted(unc["candidates"], key=lambda c: -sum(c["values"]) / len(c["values"])):
        g = c["gain"] or c["vs_best"]
        iv = Interval(g["mean"], g["ci_low"] if g["ci_low"] is not None else float("nan"),
                      g["ci_high"] if g["ci_high"] is not None else float("nan"), g["seeds"])
        mark = "=" if c["label"] == unc["answer"] else ("≈" if c["tied"] else " ")
        lines.append(f"    {mark} {c['label']:<22} {iv.text()}")
    lines.append(f"    tie set: {tie_text(unc['tie_set'])}")
    if report["choice"].get("replaces"):
        lines.append(f"    answer over the seeds: {unc['answer']} ({unc['reason']}; seed "
                     f"{unc['seeds'][0]} alone chose {report['choice']['replaces']})")
    be = report.get("breakeven") or {}
    for s in be.get("settings", []):
        if s["scale"] is None:
            lines.append(f"    break-even {s['label']}: {s['note']}")
        elif not s["scale_low"]:
            lines.append(f"    break-even {s['label']}: beats ar at every scale tried, down to "
                         f"{s['scale']:.3g} x the measured acceptance (MAL {s['mal_at_k']:.2f}"
                         f" at k = {s['k']} vs measured {s['mal_measured']:.2f})")
        else:
            lines.append(f"    break-even {s['label']}: stops beating ar between "
                         f"{s['scale_low']:.3g} and {s['scale']:.3g} x the measured acceptance "
                         f"(MAL {s['mal_at_k']:.2f} at k = {s['k']} vs measured "
                         f"{s['mal_measured']:.2f}; a_1 {s['a1']:.2f})")
    if be.get("note"):
        lines.append(f"    break-even: {be['note']}")
    band = report.get("bundled_band") or {}
    for end in band.get("ends", []):
        gain = "" if end["gain_pct"] is None else f", {end['gain_pct']:+.1f} % e2e vs ar"
        lines.append(f"    bundled {band['kind']} profile {end['profile']} (MAL {end['mal']:.2f}"
                     f" at K = {end['K']}): best {end['best'] or 'none passes'}{gain}")
    if band.get("note"):
        lines.append(f"    bundled band: {band['note']}")
    return lines


def _kv_note(mem: dict | None) -> str:
    if not mem or not mem["preemptions"]:
        return ""
    return (f" (KV needed ~{mem['kv_needed_tokens']:,} tokens = {mem['concurrency']} x "
            f"{mem['footprint_tokens']:g}, available {mem['kv_available_tokens']:,})")
