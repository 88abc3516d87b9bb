"""``specbatch prove`` and ``specbatch optimum verify|allocate``: the theorems and exact optima.

- ``prove``: the theorem catalogue (:mod:`theory.theorems`) as a table; exit 1 if any fails.
- ``optimum verify``: E[τ] under TV and BV (exact enumeration), LP A / LP B optima and the
  validity residuals of THEORY.md §4 for a model pair read from JSON.
- ``optimum allocate``: greedy (TETRIS top-C) and optimal (DP) allocations of a [N, K] value
  array under a budget C, and their values (THEORY.md §5).
- ``optimum multidraft``: n drafts of one token: α* in closed form, the optimal-transport LP and
  every multi-draft verifier's acceptance (docs/trees.md).
- ``optimum tree``: a draft tree: every tree verifier's E[τ] and the best valid verifier's LP.

Argument parsing and printing only: the work is :mod:`theory.theorems`, :mod:`theory.exact.lp`,
:mod:`theory.trees.multidraft`, :mod:`theory.trees.tree_shapes`, :mod:`theory.trees.lp` and
:mod:`analysis.optimum`.
"""

from __future__ import annotations

import argparse

from specbatch.cli.common import (
    add_json_flag,
    capped_int,
    emit,
    example,
    help_without_verb,
    nonneg_int,
    positive_int,
    seed_int,
)
from specbatch.errors import require
from specbatch.limits import MAX_LP_VARIABLES, MAX_PROVE_INSTANCES, check_allocation
from specbatch.theory.exact.lp import verify_pair

RAW = argparse.RawDescriptionHelpFormatter


def register(subparsers) -> None:
    """Add ``prove`` and ``optimum`` (verbs ``verify``, ``allocate``, ``multidraft``, ``tree``)."""
    add_prove(subparsers)
    optimum = subparsers.add_parser(
        "optimum", help="exact optima: verification LPs and allocation under a budget",
        description="Exact optima of THEORY.md §4-5: `verify` (E[τ] of TV/BV, LP A, LP B, "
                    "validity residuals), `allocate` (greedy vs optimal allocation), "
                    "`multidraft` (n drafts of one token against α*) and `tree` (draft-tree "
                    "verifiers against the best valid verifier).",
        epilog=example("specbatch optimum verify --pair pair.json --gamma 2",
                       "specbatch optimum allocate --values values.npy --budget 16",
                       "specbatch optimum multidraft --pair pair.json --drafts 2",
                       "specbatch optimum tree --pair pair.json --tree 2,1"),
        formatter_class=RAW)
    verbs = optimum.add_subparsers(dest="verb", metavar="VERB", parser_class=type(optimum))
    help_without_verb(optimum)
    add_verify(verbs)
    add_allocate(verbs)
    add_multidraft(verbs)
    add_tree(verbs)


def add_prove(subparsers) -> None:
    from specbatch.theory.theorems import DEFAULT_INSTANCES

    prove = subparsers.add_parser(
        "prove", help="check the theorem catalogue on seeded random instances",
        description="Check every catalogue theorem (losslessness, BV optimality, TETRIS "
                    "optimality, ...) on random instances by exact enumeration, LPs and MILPs; "
                    "print statement, instances, worst margin and verdict. Exit 1 if any fails.",
        epilog=example("specbatch prove", "specbatch prove --instances 50 --seed 3 --json"),
        formatter_class=RAW)
    prove.add_argument(
        "--instances",
        type=capped_int(MAX_PROVE_INSTANCES),
        default=DEFAULT_INSTANCES,
        help=f"random instances per theorem (default {DEFAULT_INSTANCES})",
    )
    prove.add_argument("--seed", type=seed_int, default=0, help="seed (default 0)")
    prove.add_argument("--only", action="append", metavar="NAME",
                       help="run only this theorem (repeatable)")
    add_json_flag(prove)
    prove.set_defaults(func=run_prove)


def add_verify(verbs) -> None:
    from specbatch.theory.exact.lp import DEFAULT_MAX_VARIABLES, DEFAULT_SOLVER

    verify = verbs.add_parser(
        "verify", help="E[τ] under TV and BV, LP A and LP B optima, validity residuals",
        description="For a model pair (JSON: {\"vocab\": V, \"draft\": MODEL, \"target\": "
                    "MODEL}, MODEL one of iid / markov / table; \"1/3\" strings make it exact) "
                    "and a draft length γ: E[τ] under token and block verification by exact "
                    "enumeration, the optima of LP B (best valid verifier) and LP A (idealised "
                    "coupling), and the validity residuals of THEORY.md §4.",
        epilog=example("specbatch optimum verify --pair pair.json --gamma 2 --json"),
        formatter_class=RAW)
    verify.add_argument("--pair", required=True, metavar="PAIR.json", help="model pair file")
    verify.add_argument("--gamma", type=int, required=True, help="draft length γ >= 1")
    verify.add_argument("--solver", default=DEFAULT_SOLVER,
                        help=f"cvxpy solver for the LPs (default {DEFAULT_SOLVER})")
    verify.add_argument("--max-variables", type=capped_int(MAX_LP_VARIABLES),
                        default=DEFAULT_MAX_VARIABLES,
                        help=f"refuse LPs larger than this (default {DEFAULT_MAX_VARIABLES}, at "
                             f"most {MAX_LP_VARIABLES}: larger LPs take hours)")
    add_json_flag(verify)
    verify.set_defaults(func=run_verify)


def add_allocate(verbs) -> None:
    allocate = verbs.add_parser(
        "allocate", help="greedy (TETRIS) vs optimal allocation of a draft-token budget",
        description="Choose prefix lengths s_i (Σ s_i <= C) maximising Σ_i Σ_{j<=s_i} "
                    "values[i, j-1] for a [N, K] array of per-position values (e.g. P(τ_i >= j)); "
                    "prints TETRIS greedy (global top-C) and the exact optimum (DP).",
        epilog=example("specbatch optimum allocate --values values.csv --budget 8 --json"),
        formatter_class=RAW)
    allocate.add_argument("--values", required=True, metavar="FILE",
                          help="[N, K] non-negative array, .npy or CSV")
    allocate.add_argument("--budget", type=nonneg_int, required=True, help="budget C (tokens) >= 0")
    allocate.add_argument("--milp", action="store_true",
                          help="also solve the MILP twin (cvxpy, HiGHS) and report its value")
    add_json_flag(allocate)
    allocate.set_defaults(func=run_allocate)


def add_multidraft(verbs) -> None:
    from specbatch.theory.exact.lp import DEFAULT_SOLVER

    multi = verbs.add_parser(
        "multidraft", help="n drafts of one token: α*, the OT LP, each verifier's acceptance",
        description="For the first position of a model pair (its empty-context rows: target p, "
                    "draft q) and n drafts: the optimal acceptance α* = min_H [p(H) + 1 − "
                    "q(H)^n] (closed form), the optimal-transport LP for i.i.d. drafts and for "
                    "drafts without replacement, and the acceptance and losslessness residual "
                    "of SpecInfer's recursive rejection sampling (with and without "
                    "replacement) and SpecTr's k-sequential selection, by exact enumeration.",
        epilog=example("specbatch optimum multidraft --pair pair.json --drafts 2 --json"),
        formatter_class=RAW)
    multi.add_argument("--pair", required=True, metavar="PAIR.json", help="model pair file")
    multi.add_argument("--drafts", type=positive_int, required=True, help="number of drafts n >= 1")
    multi.add_argument("--solver", default=DEFAULT_SOLVER,
                       help=f"cvxpy solver for the LPs (default {DEFAULT_SOLVER})")
    add_json_flag(multi)
    multi.set_defaults(func=run_multidraft)


def add_tree(verbs) -> None:
    from specbatch.theory.exact.lp import DEFAULT_SOLVER

    tree = verbs.add_parser(
        "tree", help="a draft tree: each verifier's E[τ] against the best valid verifier",
        description="For a model pair and a draft-tree law: E[τ], per-depth acceptance and the "
                    "validity residual of SpecInfer's recursive rejection sampling, Traversal "
                    "Verification and (for K x L path trees) greedy multi-path block "
                    "verification, by exact enumeration of every realised tree, and the best "
                    "valid verifier's E[τ] (an LP). SHAPE: children per depth ('2,2,1', "
                    "children drawn i.i.d. or without replacement, --sampling) or 'KxL' (K "
                    "i.i.d. draft paths of L tokens merged into a trie).",
        epilog=example("specbatch optimum tree --pair pair.json --tree 2,1",
                       "specbatch optimum tree --pair pair.json --tree 3x2 --json"),
        formatter_class=RAW)
    tree.add_argument("--pair", required=True, metavar="PAIR.json", help="model pair file")
    tree.add_argument("--tree", required=True, metavar="SHAPE",
                      help="'2,2,1' (children per depth) or '3x2' (3 i.i.d. paths of 2 tokens)")
    tree.add_argument("--sampling", choices=("iid", "distinct", "topk"), default="iid",
                      help="children per depth drawn i.i.d. (default), without replacement, "
                           "or the top-k draft tokens (deterministic, EAGLE style)")
    tree.add_argument("--solver", default=DEFAULT_SOLVER,
                      help=f"cvxpy solver for the LP (default {DEFAULT_SOLVER})")
    add_json_flag(tree)
    tree.set_defaults(func=run_tree)


# --------------------------------------------------------------------------- prove


def _fmt_margin(value: float) -> str:
    return "0" if value == 0 else f"{value:.3g}"


def run_prove(args: argparse.Namespace) -> int:
    from specbatch.theory.theorems import CATALOGUE, KINDS, run_catalogue
    require(args.instances >= 1, f"--instances: expected >= 1, got {args.instances}")
    known = [t.name for t in CATALOGUE]
    for name in args.only or []:
        require(name in known, f"--only: expected one of {known}, got {name!r}")
    results = run_catalogue(args.instances, args.seed, args.only)
    passed = all(r.passed for _, r in results)
    rows = [{"name": t.name, "statement": t.statement, "source": t.source,
             "instances": r.instances, "margin": r.margin, "margin_kind": KINDS[t.kind],
             "tolerance": t.tolerance, "verdict": "pass" if r.passed else "FAIL",
             "detail": r.detail} for t, r in results]
    obj = {"instances": args.instances, "seed": args.seed, "passed": passed, "theorems": rows}
    lines = [f"{'verdict':<7}  {'inst':>4}  {'worst margin':<22}  statement [source]"]
    for row in rows:
        margin = f"{_fmt_margin(row['margin'])} ({row['margin_kind']})"
        lines.append(f"{row['verdict']:<7}  {row['instances']:>4}  {margin:<22}  "
                     f"{row['statement']} [{row['source']}]")
        if row["detail"]:
            lines.append(f"{'':<7}  {'':>4}  {'':<22}  counterexample: {row['detail']}")
    n_fail = sum(not r.passed for _, r in results)
    lines.append(f"{len(rows) - n_fail}/{len(rows)} theorems pass "
                 f"({args.instances} instances each, seed {args.seed})")
    emit(obj, args.json, "\n".join(lines))
    return 0 if passed else 1


# --------------------------------------------------------------------------- optimum verify


def run_verify(args: argparse.Namespace) -> int:
    from specbatch.theory.exact.small_models import read_pair
    pair = read_pair(args.pair)
    out = verify_pair(pair, args.gamma, args.solver, args.max_variables)
    frac = out.get("fractions", {})

    def show(key: str) -> str:
        return f"{out[key]:.10g}" + (f"  (= {frac[key]})" if key in frac else "")

    text = "\n".join([
        f"pair {args.pair}: V={pair.vocab}, γ={args.gamma}, "
        f"{'exact rationals' if pair.exact else 'float64'}",
        f"E[τ] token verification   {show('token')}",
        f"E[τ] block verification   {show('block')}",
        f"LP B (best valid)         {out['lp_valid']:.10g}  ({out['solver']})",
        f"LP A (joint coupling)     {out['lp_joint']:.10g}  (closed form "
        f"{show('joint_closed_form')})",
        f"validity residual token   {show('residual_token')}",
        f"validity residual block   {show('residual_block')}",
    ])
    emit(out, args.json, text)
    return 0


# --------------------------------------------------------------------------- optimum allocate


def run_allocate(args: argparse.Namespace) -> int:
    from specbatch.analysis.optimum import compare_allocations, read_values

    values = read_values(args.values)  # [N, K]
    check_allocation(f"values {args.values}", values.shape[0], values.shape[1], args.budget,
                     args.milp)
    out = compare_allocations(values, args.budget, args.milp, where=f"file {args.values}")
    text = "\n".join([
        f"values {args.values}: N={out['n']}, K={out['k']}, budget C={args.budget}",
        f"greedy (top-C)  value {out['greedy_value']:.6g}  s={out['greedy']}",
        f"optimal (DP)    value {out['optimal_value']:.6g}  s={out['optimal']}",
        f"gap             {out['gap']:.6g}",
    ] + ([f"MILP            value {out['milp_value']:.6g}"] if "milp_value" in out else []))
    emit(out, args.json, text)
    return 0


# --------------------------------------------------------------------------- optimum multidraft


def run_multidraft(args: argparse.Namespace) -> int:
    from specbatch.theory.exact.small_models import read_pair
    from specbatch.theory.trees.multidraft import compare

    pair = read_pair(args.pair)
    out = compare(pair.target.row(()), pair.draft.row(()), args.drafts, args.solver)
    frac = out.get("fractions", {})

    def exact(key: str) -> str:
        return f"  (= {frac[key]})" if key in frac and "/" in frac[key] and \
            len(frac[key]) <= 40 else ""

    lines = [f"pair {args.pair}: V={pair.vocab}, n={args.drafts} drafts of the first token, "
             f"{'exact rationals' if pair.exact else 'float64'}",
             f"α* (closed form)              {out['optimal_acceptance']:.10g}"
             f"{exact('optimal_acceptance')}",
             f"OT LP, i.i.d. drafts          {out['lp']:.10g}  ({out['solver']})",
             f"OT LP, without replacement    {out['lp_without_replacement']:.10g}",
             f"one draft (Σ min(p, q))       {out['single_draft']:.10g}"]
    for name, row in out["verifiers"].items():
        lines.append(f"{name:<30}{row['acceptance']:.10g}{exact(name)}  gap "
                     f"{row['gap_to_optimum']:.3g}  residual {row['residual']:.3g}")
    lines.append(f"SpecTr ρ = {out['spectr_rho']:.10g}")
    emit(out, args.json, "\n".join(lines))
    return 0


# --------------------------------------------------------------------------- optimum tree


def run_tree(args: argparse.Namespace) -> int:
    from specbatch.theory.exact.small_models import read_pair
    from specbatch.theory.trees.lp import tree_report
    from specbatch.theory.trees.tree_shapes import parse_shape

    shape = parse_shape(args.tree, args.sampling)
    pair = read_pair(args.pair)
    out = tree_report(pair, shape, args.solver)
    frac = out.get("fractions", {})
    lines = [f"pair {args.pair}: V={pair.vocab}, tree {out['tree']}, "
             f"{out['realised_trees']} realised trees, "
             f"{'exact rationals' if pair.exact else 'float64'}",
             f"{'verifier':<12}{'E[τ]':>14}  {'gap to LP':>10}  {'residual':>9}  P(τ >= d)"]
    for name, row in out["verifiers"].items():
        tail = ", ".join(f"{v:.4g}" for v in row["depth_acceptance"])
        shown = f" (= {frac[name]})" if name in frac and len(frac[name]) <= 24 else ""
        lines.append(f"{name:<12}{row['expected_accepted']:>14.10g}  {row['gap_to_lp']:>10.3g}  "
                     f"{row['residual']:>9.3g}  {tail}{shown}")
    lines.append(f"{'best valid':<12}{out['lp_valid']:>14.10g}  (LP, {out['solver']})")
    emit(out, args.json, "\n".join(lines))
    return 0
