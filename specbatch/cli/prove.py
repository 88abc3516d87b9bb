"""``specbatch prove`` and ``specbatch optimum verify|allocate`` (issue 3 §5).

- ``prove``: the theorem catalogue (:mod:`theory.catalogue`) as a table; exit 1 if any fails.
- ``optimum verify``: E[τ] under TV and BV (exact enumeration), LP A / LP B optima and the
  validity residuals of THEORY.md §4 for a model pair read from JSON.
- ``optimum allocate``: greedy (TETRIS top-C) and optimal (DP) allocations of a [N, K] value
  array under a budget C, and their values (THEORY.md §5).

The CLI helpers (``example``, ``add_json_flag``, ``emit``) live in the CLI root
:mod:`analysis.cli`; they are imported inside the functions below, which only the root calls,
so importing :mod:`theory` never pulls in ``analysis``.
"""

from __future__ import annotations

import argparse
import os

import numpy as np

from specbatch.cli.common import add_json_flag, emit, example
from specbatch.errors import SpecbatchError, require
from specbatch.theory.lp import verify_pair


def register(subparsers) -> None:
    """Add ``prove`` and ``optimum`` (verbs ``verify``, ``allocate``) to the CLI root."""
    from specbatch.theory.catalogue import DEFAULT_INSTANCES
    from specbatch.theory.lp import DEFAULT_MAX_VARIABLES, DEFAULT_SOLVER
    raw = argparse.RawDescriptionHelpFormatter

    prove = subparsers.add_parser(
        "prove", help="check the theorem catalogue on seeded random instances",
        description="Check every catalogue theorem (losslessness, BV optimality, TETRIS "
                    "optimality, ...) on random instances by exact enumeration, LPs and MILPs; "
                    "print statement, instances, worst margin and verdict. Exit 1 if any fails.",
        epilog=example("specbatch prove", "specbatch prove --instances 50 --seed 3 --json"),
        formatter_class=raw)
    prove.add_argument("--instances", type=int, default=DEFAULT_INSTANCES,
                       help=f"random instances per theorem (default {DEFAULT_INSTANCES})")
    prove.add_argument("--seed", type=int, default=0, help="seed (default 0)")
    prove.add_argument("--only", action="append", metavar="NAME",
                       help="run only this theorem (repeatable)")
    add_json_flag(prove)
    prove.set_defaults(func=run_prove)

    optimum = subparsers.add_parser(
        "optimum", help="exact optima: verification LPs and allocation under a budget",
        description="Exact optima of THEORY.md §4-5: `verify` (E[τ] of TV/BV, LP A, LP B, "
                    "validity residuals) and `allocate` (greedy vs optimal allocation).",
        epilog=example("specbatch optimum verify --pair pair.json --gamma 2",
                       "specbatch optimum allocate --values values.npy --budget 16"),
        formatter_class=raw)
    verbs = optimum.add_subparsers(dest="verb", metavar="VERB", parser_class=type(optimum))
    optimum.set_defaults(func=lambda args: _missing_verb(optimum))

    verify = verbs.add_parser(
        "verify", help="E[τ] under TV and BV, LP A and LP B optima, validity residuals",
        description="For a model pair (JSON: {\"vocab\": V, \"draft\": MODEL, \"target\": "
                    "MODEL}, MODEL one of iid / markov / table; \"1/3\" strings make it exact) "
                    "and a draft length γ: E[τ] under token and block verification by exact "
                    "enumeration, the optima of LP B (best valid verifier) and LP A (idealised "
                    "coupling), and the validity residuals of THEORY.md §4.",
        epilog=example("specbatch optimum verify --pair pair.json --gamma 2 --json"),
        formatter_class=raw)
    verify.add_argument("--pair", required=True, metavar="PAIR.json", help="model pair file")
    verify.add_argument("--gamma", type=int, required=True, help="draft length γ >= 1")
    verify.add_argument("--solver", default=DEFAULT_SOLVER,
                        help=f"cvxpy solver for the LPs (default {DEFAULT_SOLVER})")
    verify.add_argument("--max-variables", type=int, default=DEFAULT_MAX_VARIABLES,
                        help=f"refuse LPs larger than this (default {DEFAULT_MAX_VARIABLES})")
    add_json_flag(verify)
    verify.set_defaults(func=run_verify)

    allocate = verbs.add_parser(
        "allocate", help="greedy (TETRIS) vs optimal allocation of a draft-token budget",
        description="Choose prefix lengths s_i (Σ s_i <= C) maximising Σ_i Σ_{j<=s_i} "
                    "values[i, j-1] for a [N, K] array of per-position values (e.g. P(τ_i >= j)); "
                    "prints TETRIS greedy (global top-C) and the exact optimum (DP).",
        epilog=example("specbatch optimum allocate --values values.csv --budget 8 --json"),
        formatter_class=raw)
    allocate.add_argument("--values", required=True, metavar="FILE",
                          help="[N, K] non-negative array, .npy or CSV")
    allocate.add_argument("--budget", type=int, required=True, help="budget C (tokens) >= 0")
    allocate.add_argument("--milp", action="store_true",
                          help="also solve the MILP twin (cvxpy, HiGHS) and report its value")
    add_json_flag(allocate)
    allocate.set_defaults(func=run_allocate)


def _missing_verb(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 2


# --------------------------------------------------------------------------- prove


def _fmt_margin(value: float) -> str:
    return "0" if value == 0 else f"{value:.3g}"


def run_prove(args: argparse.Namespace) -> int:
    from specbatch.theory.catalogue import CATALOGUE, KINDS, run_catalogue
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
    from specbatch.theory.models import read_pair
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
        f"LP A (joint coupling)     {out['lp_joint']:.10g}  (closed form {show('joint_closed_form')})",
        f"validity residual token   {show('residual_token')}",
        f"validity residual block   {show('residual_block')}",
    ])
    emit(out, args.json, text)
    return 0


# --------------------------------------------------------------------------- optimum allocate


def read_values(path: str) -> np.ndarray:
    """A [N, K] float array from .npy or CSV (comma-separated, no header)."""
    if not os.path.exists(path):
        raise SpecbatchError(f"file {path}: not found")
    try:
        if path.endswith(".npy"):
            values = np.load(path, allow_pickle=False)
        else:
            values = np.loadtxt(path, delimiter=",", ndmin=2, dtype=np.float64)
    except ValueError as exc:
        raise SpecbatchError(f"file {path}: expected a numeric [N, K] array ({exc})") from None
    require(values.ndim == 2, f"file {path}: expected a 2-d [N, K] array, got shape "
                              f"{values.shape}")
    require(np.issubdtype(values.dtype, np.number),
            f"file {path}: expected a numeric array, got dtype {values.dtype}")
    return values.astype(np.float64)


def run_allocate(args: argparse.Namespace) -> int:
    from specbatch.theory.allocate import allocation_value, greedy_topc, optimal_dp, optimal_milp
    values = read_values(args.values)  # [N, K]
    try:
        greedy = greedy_topc(values, args.budget)
        optimal = optimal_dp(values, args.budget)
        milp = optimal_milp(values, args.budget) if args.milp else None
    except SpecbatchError as exc:
        raise SpecbatchError(f"file {args.values}: {exc}") from None
    g_val, o_val = allocation_value(values, greedy), allocation_value(values, optimal)
    out = {"n": int(values.shape[0]), "k": int(values.shape[1]), "budget": args.budget,
           "greedy": greedy.tolist(), "greedy_value": g_val,
           "optimal": optimal.tolist(), "optimal_value": o_val, "gap": o_val - g_val}
    if milp is not None:
        out["milp_value"] = allocation_value(values, milp)
    text = "\n".join([
        f"values {args.values}: N={values.shape[0]}, K={values.shape[1]}, budget C={args.budget}",
        f"greedy (top-C)  value {g_val:.6g}  s={greedy.tolist()}",
        f"optimal (DP)    value {o_val:.6g}  s={optimal.tolist()}",
        f"gap             {o_val - g_val:.6g}",
    ] + ([f"MILP            value {out['milp_value']:.6g}"] if milp is not None else []))
    emit(out, args.json, text)
    return 0
