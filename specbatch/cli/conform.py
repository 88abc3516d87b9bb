"""``specbatch conform VERIFIER``: is a rejection sampler lossless, and how much does it accept?

Argument parsing and printing only; the check is :func:`specbatch.theory.conform.check.conform`
and the samplers :mod:`specbatch.theory.conform.samplers`. Exit 0: no violation detected;
1: the sampler is shown lossy (the pair, the observed and the exact law are printed);
2: bad input (VERIFIER not found, an output that breaks the engine contract).
"""

from __future__ import annotations

import argparse
import math
import sys

from specbatch.cli.common import (
    add_json_flag,
    add_user_timeout_flag,
    emit,
    example,
    positive_int,
    seed_int,
)

RAW = argparse.RawDescriptionHelpFormatter


def register(subparsers) -> None:
    """Add ``conform`` to the CLI root."""
    from specbatch.theory.conform.check import DEFAULT_ALPHA, DEFAULT_SAMPLES, MAX_SAMPLES
    from specbatch.theory.conform.pairs import CLASSES
    from specbatch.theory.conform.samplers import BUILTINS, DRAFT_LAWS, INTERFACES, TARGETS

    parser = subparsers.add_parser(
        "conform", help="check that a rejection sampler preserves the target's law",
        description=(
            "Draw small-vocabulary model pairs (" + ", ".join(CLASSES) + "), draw drafts from "
            "the stated draft law, call VERIFIER in batches and test the joint law of the "
            "first m tokens, m = 1..γ+1 (its output, completed by target sampling), against "
            "the exact target law, and its mean accepted length against the best valid "
            "verifier's (BV = LP B); every test is calibrated at every sample size (exact and "
            "Monte Carlo p-values), Holm-corrected over all tests of all pairs, and the power "
            "is printed as the smallest TV deviation caught with probability 0.95. Exact "
            "checks: zero-probability tokens never emitted, accepted tokens are the drafted "
            "ones, and with --target greedy (temperature 0) the output equals non-speculative "
            "greedy decoding token for token (pairs with tied maxima added). VERIFIER is a "
            "built-in (" + ", ".join(BUILTINS) + "), 'catalogue' (every engine sampler, "
            "correct and broken, with the draws needed to catch each) or "
            "package.module:callable with the padded signature fn(draft_token_ids [B, γ] "
            "int64, draft_probs [B, γ, V] or None, target_probs [B, γ+1, V], generator) -> "
            "output_token_ids [B, γ+1] int64 (emitted tokens, then -1), or with --interface "
            "ragged vLLM V1's fn(draft_token_ids [T], cu_num_draft_tokens [B], draft_probs "
            "[T, V] or None, target_probs [T, V], bonus_token_ids [B, 1], generator) -> "
            "[B, max γ_b + 1]. Exit 0: no violation detected; 1: shown lossy; 2: bad input."),
        epilog=example("specbatch conform vllm-block",
                       "specbatch conform mypkg.sampler:rejection_sample --draft greedy --json",
                       "specbatch conform bv-torch --samples 50000 --seed 3",
                       "specbatch conform vllm-v1 --detect 0.02",
                       "specbatch conform catalogue --alpha 0.01",
                       "specbatch conform --endpoint http://127.0.0.1:8000 --reference "
                       "http://127.0.0.1:8001 --out /tmp/conf",
                       "specbatch conform --endpoint http://127.0.0.1:8000 --target-model "
                       "/tmp/zoo/target --json"),
        formatter_class=RAW)
    parser.add_argument("verifier", metavar="VERIFIER", nargs="?", default=None,
                        help="built-in name or package.module:callable (not with --endpoint)")
    parser.add_argument("--samples", type=positive_int, default=None,
                        help=f"samples per pair (default {DEFAULT_SAMPLES}; with --endpoint: "
                             "completions per prompt and temperature, default 300; at most "
                             f"{MAX_SAMPLES} unless SPECBATCH_ALLOW_LARGE=1)")
    parser.add_argument("--detect", type=float, default=None, metavar="TV",
                        help="choose the samples per pair so that a deviation of this total "
                             "variation from the target law is caught with probability 0.95 "
                             "(overrides --samples)")
    parser.add_argument("--seed", type=seed_int, default=0, help="seed of pairs, drafts and the "
                        "sampler's torch.Generator (default 0)")
    parser.add_argument("--draft", choices=DRAFT_LAWS, default=None,
                        help="draft law: probabilistic (X ~ Ms, draft_probs given) or greedy "
                             "(argmax of Ms, draft_probs None); default: the built-in's, "
                             "else probabilistic")
    parser.add_argument("--seeds", type=positive_int, default=3,
                        help="catalogue: seeds every row is judged over (default 3)")
    parser.add_argument("--interface", choices=INTERFACES, default=None,
                        help="padded [B, γ] (default for a callable) or ragged (vLLM V1's "
                             "flattened drafts with cu_num_draft_tokens; each request drafts "
                             "0..γ tokens)")
    add_user_timeout_flag(parser, "a user's sampler (one batch)")
    parser.add_argument("--target", choices=TARGETS, default=None,
                        help="sample (temperature > 0, default for a callable) or greedy "
                             "(temperature 0: output must equal greedy decoding)")
    parser.add_argument("--alpha", type=float, default=DEFAULT_ALPHA,
                        help=f"family-wise false-alarm level (default {DEFAULT_ALPHA:g})")
    parser.add_argument("--only", action="append", metavar="CLASS",
                        choices=[*CLASSES, "ties"],
                        help="check only this pair class (repeatable; ties: tied target "
                             "maxima, greedy targets only)")
    _add_endpoint_flags(parser)
    add_json_flag(parser)
    parser.set_defaults(func=run)


def _add_endpoint_flags(parser) -> None:
    """``--endpoint URL``: check a running OpenAI-compatible server instead of a sampler."""
    from specbatch.analysis.endpoint.check import (
        DEFAULT_GREEDY,
        DEFAULT_SAMPLES,
        DEFAULT_TEMPERATURES,
        DEFAULT_TOKENS,
    )

    g = parser.add_argument_group(
        "running server (--endpoint)",
        "send the same prompts to a server with speculation (--endpoint) and to a reference "
        "without it (--reference URL, or the exact target law from --target-model DIR), at "
        "several temperatures with concurrent requests; test the joint law of the first m "
        "tokens per prompt (Holm-corrected, power stated), greedy token for token, and read "
        "acceptance from /metrics (docs/prove.md)")
    g.add_argument("--endpoint", default=None, metavar="URL",
                   help="base URL of the server under test (http://HOST:PORT)")
    g.add_argument("--reference", default=None, metavar="URL",
                   help="base URL of the same model served without speculation")
    g.add_argument("--target-model", default=None, metavar="DIR",
                   help="the target's local HF directory: the reference is its exact law "
                        "(prompts are sent as token ids)")
    g.add_argument("--prompts", default=None, metavar="FILE",
                   help="prompts file (JSONL/JSON/text, as capture reads; default: 4 bundled "
                        "prompts)")
    g.add_argument("--temperatures", default=None, metavar="T,T,...",
                   help="temperatures (default " + ",".join(f"{t:g}" for t in
                                                             DEFAULT_TEMPERATURES)
                        + "; 0: greedy, checked token for token)")
    g.add_argument("--tokens", type=positive_int, default=DEFAULT_TOKENS, metavar="M",
                   help=f"joint law of the first M tokens (default {DEFAULT_TOKENS})")
    g.add_argument("--greedy-requests", type=positive_int, default=DEFAULT_GREEDY,
                   metavar="N", help=f"greedy requests per prompt (default {DEFAULT_GREEDY})")
    g.add_argument("--concurrency", type=positive_int, default=8,
                   help="requests in flight at once (default 8; > 2 so the server batches)")
    g.add_argument("--timeout", type=float, default=60.0,
                   help="seconds per request (default 60)")
    g.add_argument("--retries", type=int, default=3,
                   help="retries of a failed request (default 3)")
    g.add_argument("--budget", type=positive_int, default=10**9,
                   help="most requests this run sends (stops with exit 3; rerun resumes)")
    g.add_argument("--api-key", default=None, help="Bearer token of both servers")
    g.add_argument("--out", default=None,
                   help="result folder: the draws (a rerun resumes them) and report.json")
    g.add_argument("--force", action="store_true",
                   help="--out may hold a conform-endpoint result of other settings")
    parser.set_defaults(endpoint_samples=DEFAULT_SAMPLES)


def _num(x, digits: int = 3) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def _case_line(c) -> str:
    mark = "LOSSY" if c.lossy else "ok"
    p = min((t.fit.p_value for t in c.tests), default=math.nan)
    return (f"  {c.label:<14} {c.vocab:>2} {c.gamma:>2}  {p:>8.2g}  "
            f"{_num(c.detectable_tv):>6}  {_num(c.observed_tv):>6}  {_num(c.noise_tv):>6}  "
            f"{c.mean_tau:>6.3f}  {_num(c.tau_token):>6}  {_num(c.tau_block):>6}  "
            f"{_num(c.lp_b):>6}  {mark}")


def render(report) -> str:
    """The text report: a table per pair class, the violations, the power, the verdict."""
    lines = [f"conform {report.verifier}: draft {report.draft}, target {report.target}, "
             f"interface {report.interface}, {report.samples} samples per pair, seed "
             f"{report.seed}, family-wise α = {report.alpha:g} (Holm over {report.tests} tests)",
             "p-min: smallest p-value of the laws of the first m = 1..γ+1 tokens; dTV: smallest "
             "TV deviation caught with probability 0.95; obsTV: observed TV (noise: its expected "
             "value for an exact sampler); E[τ]: observed vs TV exact, BV exact and LP B"]
    header = (f"  {'pair':<14} {'V':>2} {'γ':>2}  {'p-min':>8}  {'dTV':>6}  {'obsTV':>6}  "
              f"{'noise':>6}  {'E[τ]':>6}  {'TV':>6}  {'BV':>6}  {'LP B':>6}  verdict")
    kinds = list(dict.fromkeys(c.kind for c in report.cases))
    for kind in kinds:
        lines += ["", f"[{kind}]", header]
        lines += [_case_line(c) for c in report.cases if c.kind == kind]
    for c in report.cases:
        if c.notes:
            lines += ["", f"{c.label} (note): " + "; ".join(c.notes)]
    bad = [c for c in report.cases if c.lossy]
    for c in bad:
        lines += ["", f"{c.label}: " + "; ".join(c.violations), f"  pair: {c.pair}"]
        if report.target == "sample":
            lines.append("  largest deviations (tokens: observed vs exact): " + ", ".join(
                f"{''.join(map(str, t))}: {o:.4f} vs {e:.4f}" for t, o, e in c.worst_cells()))
    lines.append("")
    if report.detectable_tv is not None:
        lines.append(f"power: a deviation of TV >= {report.detectable_tv:.4f} from the target law "
                     f"of any pair is caught with probability 0.95 at {report.samples} samples "
                     f"(false alarm <= {report.alpha:g}); --detect TV chooses the samples")
    else:
        lines.append("power: greedy target: every emitted token is compared with greedy "
                     "decoding exactly")
    exact = [c.exact_tv for c in report.cases if c.exact_tv is not None]
    tv = bad and report.target == "sample"
    lines += [f"verdict: {report.verdict}"
              + (f" (max observed TV from the target law {max(c.observed_tv for c in bad):.3f}"
                 + (f", exact {max(exact):.3f}" if exact else "") + ")" if tv else "")]
    return "\n".join(lines)


def _progress(text: str) -> None:
    sys.stderr.write(f"specbatch conform: {text}\n")
    sys.stderr.flush()


def run(args: argparse.Namespace) -> int:
    from specbatch.errors import require
    from specbatch.theory.conform.check import conform
    from specbatch.theory.conform.samplers import load_sampler

    if args.endpoint is not None:
        require(args.verifier is None, f"VERIFIER: expected none with --endpoint, got "
                f"{args.verifier!r}")
        return run_endpoint(args)
    require(args.verifier is not None, "VERIFIER: expected a sampler name, 'catalogue', or "
            "--endpoint URL")
    if args.samples is None:
        from specbatch.theory.conform.check import DEFAULT_SAMPLES

        args.samples = DEFAULT_SAMPLES
    if args.verifier == "catalogue":
        return run_catalogue(args)
    sampler = load_sampler(args.verifier, args.draft, args.interface, args.target)
    kinds = tuple(args.only) if args.only else None
    report = conform(sampler, samples=args.samples, seed=args.seed, alpha=args.alpha,
                     kinds=kinds, detect=args.detect, progress=_progress)
    emit(report.to_json(), args.json, render(report))
    return report.exit_code


def render_catalogue(results, alpha: float) -> str:
    """The catalogue table: each row's expectation, verdict and draws needed to catch it."""
    n, seeds = results[0].samples, results[0].seeds
    lines = [f"conform catalogue: {n} samples per pair, {seeds} seeds, family-wise α = "
             f"{alpha:g}; draws: smallest samples per pair at which every seed caught it",
             f"  {'sampler':<21} {'engine':<12} {'expected':<16} {'caught':>7}  {'draws':>7}  "
             "judged", ]
    for r in results:
        draws = "-" if r.draws_needed is None else str(r.draws_needed)
        lines.append(f"  {r.row.name:<21} {r.row.engine:<12} {r.row.expected:<16} "
                     f"{r.caught:>3}/{r.seeds:<3}  {draws:>7}  "
                     f"{'right' if r.correct else 'WRONG'}")
    lines += [""] + [f"  {r.row.name}: {r.row.source}" + (f"; {r.row.deviation}"
                                                          if r.row.deviation else "")
                     for r in results]
    bad = [r.row.name for r in results if not r.correct]
    lines += ["", "verdict: every row judged right" if not bad
              else "verdict: judged WRONG: " + ", ".join(bad)]
    return "\n".join(lines)


def run_catalogue(args: argparse.Namespace) -> int:
    """``specbatch conform catalogue``: exit 0 when every row is judged as it should be."""
    from specbatch.theory.conform.catalogue import run_catalogue as judge
    from specbatch.theory.conform.check import check_settings

    check_settings(args.samples, args.alpha, 1, None)
    kinds = tuple(args.only) if args.only else None
    results = judge(args.samples, args.seeds, args.alpha, kinds, progress=_progress)
    obj = {"samples": args.samples, "seeds": args.seeds, "alpha": args.alpha,
           "rows": [{"sampler": r.row.name, "engine": r.row.engine, "source": r.row.source,
                     "expected": r.row.expected, "deviation": r.row.deviation,
                     "caught": r.caught, "draws_needed": r.draws_needed,
                     "judged_right": r.correct} for r in results]}
    emit(obj, args.json, render_catalogue(results, args.alpha))
    return 0 if all(r.correct for r in results) else 1


def _temperatures(text: str | None) -> tuple:
    from specbatch.analysis.endpoint.check import DEFAULT_TEMPERATURES
    from specbatch.errors import SpecbatchError

    if text is None:
        return DEFAULT_TEMPERATURES
    try:
        values = tuple(float(t) for t in text.split(",") if t.strip())
    except ValueError:
        raise SpecbatchError(f"--temperatures: expected numbers separated by commas, got "
                             f"{text!r}") from None
    return values


def run_endpoint(args: argparse.Namespace) -> int:
    """``specbatch conform --endpoint``: exit 0 no violation, 1 lossy, 2 bad input, 3 the
    request budget ran out (draws kept in --out; rerun to resume)."""
    from specbatch.analysis.endpoint.check import PROMPTS, EndpointSettings, conform_endpoint
    from specbatch.analysis.endpoint.client import BudgetSpent

    prompts = PROMPTS
    if args.prompts is not None:
        from specbatch.traces.capture.prompts import load_prompts

        prompts = tuple(p.text for p in load_prompts(args.prompts, None))
    settings = EndpointSettings(
        endpoint=args.endpoint, reference=args.reference, target_model=args.target_model,
        prompts=prompts, temperatures=_temperatures(args.temperatures),
        samples=args.samples or args.endpoint_samples, tokens=args.tokens,
        greedy=args.greedy_requests, alpha=args.alpha, seed=args.seed,
        concurrency=args.concurrency, timeout=args.timeout, retries=args.retries,
        budget=args.budget, api_key=args.api_key)
    settings.check()
    if settings.concurrency <= 2:
        sys.stderr.write("note: --concurrency <= 2 never batches more than two requests; "
                         "faults that need a larger batch (1Cat-vLLM #656) cannot show\n")
    try:
        report = conform_endpoint(settings, args.out, progress=_progress, force=args.force)
    except BudgetSpent as exc:
        sys.stderr.write(f"specbatch: {exc}; the draws are kept"
                         + (f" in {args.out}: rerun the same command to resume\n" if args.out
                            else " only with --out\n"))
        return 3
    emit(report, args.json, render_endpoint(report))
    return report["exit_code"]


def render_endpoint(r: dict) -> str:
    """The text report: settings, violations, power, acceptance, verdict."""
    lines = [f"conform --endpoint {r['endpoint']} ({r['model']}) against {r['reference']}: "
             f"{r['prompts']} prompts, temperatures "
             + ", ".join(f"{t:g}" for t in r["temperatures"])
             + f"; first {r['tokens']} tokens, {r['samples']} completions per prompt and "
             f"T > 0, {r['greedy']} greedy each; {r['requests_spent']} requests in all "
             f"({r['requests_this_run']} this run)"]
    worst = sorted((t for t in r["tests"]), key=lambda t: t["p_value"])[:3]
    if worst:
        lines.append("smallest p-values: " + "; ".join(
            f"prompt {t['prompt']} T={t['temperature']:g} m={t['m']}: p = {t['p_value']:.2g} "
            f"(obsTV {t['observed_tv']:.3f})" for t in worst))
    lines += [f"  {v}" for v in r["violations"]]
    p = r["power"]
    if p["detectable_tv"] is not None:
        lines.append(f"power: a deviation of TV >= {p['detectable_tv']:.4f} in the law of the "
                     f"first {r['tokens']} tokens is caught with probability 0.95 at "
                     f"{p['draws']} completions per prompt and temperature (false alarm <= "
                     f"{p['false_alarm']:g}, Holm over {p['holm_tests']} tests"
                     + ("; two-sample: approximate" if p["approximate"] else "") + "); by m: "
                     + ", ".join(f"{j + 1}: {x:.3f}" for j, x in
                                 enumerate(p["detectable_tv_by_m"]) if x is not None))
    for name, acc in (("acceptance", r["acceptance"]),
                      ("reference acceptance", r.get("reference_acceptance"))):
        if acc and acc["mal"] is not None:
            lines.append(f"{name} (/metrics): MAL {acc['mal']:.3f} (1 + A/D), acceptance rate "
                         f"{acc['acceptance_rate']:.3f} (A/T), P(τ > j) "
                         + " ".join(f"{x:.3f}" for x in acc["p_tau_at_least"])
                         + f" over {acc['drafts']:.0f} drafts")
    if r.get("acceptance_note"):
        lines.append(f"acceptance: - ({r['acceptance_note']})")
    lines.append(f"verdict: {r['verdict']}")
    return "\n".join(lines)
