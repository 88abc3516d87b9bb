"""LP B (best valid verifier, THEORY.md §4) solve time for V=3, γ=3 and V=4, γ=3.

Per instance size, on seeded random Markov pairs: the time to build the sparse LP
(:func:`theory.exact.lp.lp_b_program`), to solve it with ``scipy.optimize.linprog(method="highs")``
directly on those arrays, and through cvxpy (:func:`theory.exact.lp.solve_program`: HiGHS, the
default, and CLARABEL), plus the largest deviation of each optimum from the exact E[τ_BV]
(:func:`theory.exact.enumeration.expected_tau`; "err HiGHS" is the worse of linprog and
cvxpy+HiGHS). Times are the median over ``--repeats`` solves.

    .venv/bin/python benchmarks/lp_bench.py [--repeats 5] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from scipy.optimize import linprog

from specbatch.theory.exact.enumeration import expected_tau
from specbatch.theory.exact.lp import lp_b_program, solve_program
from specbatch.theory.exact.small_models import random_pair

SIZES = ((3, 3), (4, 3))


def median_ms(fn, repeats: int) -> tuple[float, object]:
    out, times = None, []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times), out


def bench(vocab: int, gamma: int, repeats: int) -> dict:
    pair = random_pair(vocab * 10 + gamma, vocab, "markov")
    exact_bv = float(expected_tau(pair, gamma, "block"))
    build_ms, program = median_ms(lambda: lp_b_program(pair, gamma), repeats)

    def direct():
        res = linprog(-program.c, A_eq=program.a_eq, b_eq=program.b_eq, bounds=(0, None),
                      method="highs")
        assert res.status == 0, res.message
        return -res.fun

    linprog_ms, linprog_val = median_ms(direct, repeats)
    highs_ms, highs = median_ms(lambda: solve_program(program, "HIGHS"), repeats)
    clarabel_ms, clarabel = median_ms(lambda: solve_program(program, "CLARABEL"), repeats)
    return {
        "V": vocab, "gamma": gamma, "variables": int(program.c.shape[0]),
        "constraints": int(program.a_eq.shape[0]), "build_ms": build_ms,
        "linprog_highs_ms": linprog_ms, "cvxpy_highs_ms": highs_ms,
        "cvxpy_clarabel_ms": clarabel_ms, "cvxpy_highs_over_linprog": highs_ms / linprog_ms,
        "err_linprog": abs(linprog_val - exact_bv), "err_cvxpy_highs": abs(highs.value - exact_bv),
        "err_cvxpy_clarabel": abs(clarabel.value - exact_bv),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = [bench(v, g, args.repeats) for v, g in SIZES]
    if args.json:
        print(json.dumps(rows))
        return
    head = (f"{'V':>2} {'γ':>2} {'vars':>5} {'eqs':>4} {'build ms':>9} {'linprog ms':>11} "
            f"{'cvxpy+HiGHS ms':>15} {'cvxpy+CLARABEL ms':>18} {'cvxpy/linprog':>14} "
            f"{'err HiGHS':>10} {'err CLARABEL':>12}")
    print(head)
    for r in rows:
        err = max(r["err_linprog"], r["err_cvxpy_highs"])
        print(f"{r['V']:>2} {r['gamma']:>2} {r['variables']:>5} {r['constraints']:>4} "
              f"{r['build_ms']:>9.2f} {r['linprog_highs_ms']:>11.2f} {r['cvxpy_highs_ms']:>15.2f} "
              f"{r['cvxpy_clarabel_ms']:>18.2f} {r['cvxpy_highs_over_linprog']:>13.2f}x "
              f"{err:>10.1e} {r['err_cvxpy_clarabel']:>12.1e}")


if __name__ == "__main__":
    main()
