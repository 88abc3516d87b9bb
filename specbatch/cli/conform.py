"""``specbatch conform VERIFIER``: is a rejection sampler lossless, and how much does it accept?

Argument parsing and printing only; the check is :func:`specbatch.theory.conform.conform`
and the samplers :mod:`specbatch.theory.conform_samplers`. Exit 0: no violation detected;
1: the sampler is shown lossy (the pair, the observed and the exact law are printed);
2: bad input (VERIFIER not found, an output that breaks the engine contract).
"""

from __future__ import annotations

import argparse
import math

from specbatch.cli.common import add_json_flag, emit, example, seed_int

RAW = argparse.RawDescriptionHelpFormatter


def register(subparsers) -> None:
    """Add ``conform`` to the CLI root."""
    from specbatch.theory.conform import DEFAULT_ALPHA, DEFAULT_SAMPLES
    from specbatch.theory.conform_pairs import CLASSES
    from specbatch.theory.conform_samplers import BUILTINS, DRAFT_LAWS

    parser = subparsers.add_parser(
        "conform", help="check that a rejection sampler preserves the target's law",
        description=(
            "Draw small-vocabulary model pairs (" + ", ".join(CLASSES) + "), draw drafts from "
            "the stated draft law, call VERIFIER in batches and test the law of the first γ+1 "
            "tokens (its output, completed by target sampling) against the exact target law "
            "(G-test, Bonferroni over pairs, power stated as the smallest TV bias detected with "
            "probability 0.9), plus exact checks (zero-probability tokens never emitted, "
            "accepted tokens are the drafted ones, p = q accepts everything). Reports the mean "
            "accepted length against TV's exact value and the block optimum (LP B). VERIFIER "
            "is a built-in (" + ", ".join(BUILTINS) + ") or package.module:callable with the "
            "signature fn(draft_token_ids [B, γ] int64, draft_probs [B, γ, V] or None, "
            "target_probs [B, γ+1, V], generator) -> output_token_ids [B, γ+1] int64 "
            "(emitted tokens, then -1). Exit 0: no violation detected; 1: shown lossy; "
            "2: bad input."),
        epilog=example("specbatch conform vllm-block",
                       "specbatch conform mypkg.sampler:rejection_sample --draft greedy --json",
                       "specbatch conform bv-torch --samples 50000 --seed 3"),
        formatter_class=RAW)
    parser.add_argument("verifier", metavar="VERIFIER",
                        help="built-in name or package.module:callable")
    parser.add_argument("--samples", type=int, default=DEFAULT_SAMPLES,
                        help=f"samples per pair (default {DEFAULT_SAMPLES})")
    parser.add_argument("--seed", type=seed_int, default=0, help="seed of pairs, drafts and the "
                        "sampler's torch.Generator (default 0)")
    parser.add_argument("--draft", choices=DRAFT_LAWS, default=None,
                        help="draft law: probabilistic (X ~ Ms, draft_probs given) or greedy "
                             "(argmax of Ms, draft_probs None); default: the built-in's, "
                             "else probabilistic")
    parser.add_argument("--alpha", type=float, default=DEFAULT_ALPHA,
                        help=f"family-wise false-alarm level (default {DEFAULT_ALPHA:g})")
    parser.add_argument("--only", action="append", metavar="CLASS", choices=list(CLASSES),
                        help="check only this pair class (repeatable)")
    add_json_flag(parser)
    parser.set_defaults(func=run)


def _num(x: float, digits: int = 3) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def _case_line(c) -> str:
    mark = "LOSSY" if c.lossy else "ok"
    return (f"  {c.label:<14} {c.vocab:>2} {c.gamma:>2}  {c.fit.p_value:>8.2g}  "
            f"{_num(c.fit.detectable_tv):>6}  {_num(c.observed_tv):>6}  {_num(c.noise_tv):>6}  "
            f"{c.mean_tau:>6.3f}±{c.se_tau:<5.3f} {_num(c.tau_token):>6}  {_num(c.tau_block):>6}  "
            f"{_num(c.lp_b):>6}  {mark}")


def render(report) -> str:
    """The text report: a table per pair class, the violations, the verdict."""
    lines = [f"conform {report.verifier}: draft {report.draft}, {report.samples} samples per "
             f"pair, seed {report.seed}, family-wise α = {report.alpha:g} "
             f"(per pair {report.alpha / len(report.cases):.2g})",
             "law of the first γ+1 tokens vs the target (G-test); dTV: smallest TV bias "
             "detected with probability 0.9; obsTV: observed TV (noise: its expected value "
             "for an exact sampler); E[τ]: observed vs TV exact, BV exact and LP B (optimum)"]
    header = (f"  {'pair':<14} {'V':>2} {'γ':>2}  {'p-value':>8}  {'dTV':>6}  {'obsTV':>6}  "
              f"{'noise':>6}  {'E[τ] obs':<12} {'TV':>6}  {'BV':>6}  {'LP B':>6}  verdict")
    kinds = list(dict.fromkeys(c.kind for c in report.cases))
    for kind in kinds:
        lines += ["", f"[{kind}]", header]
        lines += [_case_line(c) for c in report.cases if c.kind == kind]
    bad = [c for c in report.cases if c.lossy]
    for c in bad:
        lines += ["", f"{c.label}: " + "; ".join(c.violations), f"  pair: {c.pair}",
                  "  largest deviations (tokens: observed vs exact): " + ", ".join(
                      f"{''.join(map(str, t))}: {o:.4f} vs {e:.4f}" for t, o, e in c.worst_cells())]
    exact = [c.exact_tv for c in report.cases if c.exact_tv is not None]
    lines += ["", f"verdict: {report.verdict}"
              + (f" (max observed TV from the target law {max(c.observed_tv for c in bad):.3f}"
                 + (f", exact {max(exact):.3f}" if exact else "") + ")" if bad else "")]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from specbatch.theory.conform import conform
    from specbatch.theory.conform_samplers import load_sampler

    sampler = load_sampler(args.verifier, args.draft)
    if not (0.0 < args.alpha < 1.0):
        from specbatch.errors import SpecbatchError
        raise SpecbatchError(f"--alpha: expected a level in (0, 1), got {args.alpha}")
    kinds = tuple(args.only) if args.only else None
    report = conform(sampler, samples=args.samples, seed=args.seed, alpha=args.alpha, kinds=kinds)
    emit(report.to_json(), args.json, render(report))
    return report.exit_code
