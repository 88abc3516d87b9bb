"""Per-op laws against AIConfigurator's measured vLLM op tables: the leave-one-shape-out table.

    python benchmarks/cost_vs_aic.py                      # the bundled laws' table (instant)
    python benchmarks/cost_vs_aic.py --tables DATA --system h100_sxm   # refit from the tables

``DATA`` is AIConfigurator's ``aic-core/src/aiconfigurator_core/systems/data`` (github
ai-dynamo/aiconfigurator). Every law is fitted on one GPU's table at one vLLM version and judged
on the shapes it did not see (simulator.cost.measured.aic_laws): "law" is the law fitted without the
shape; "transfer" is that law times the measured/law ratio of the two nearest measured shapes
at the same batch / context / tokens. docs/fidelity.md carries the table.
"""

from __future__ import annotations

import argparse

from specbatch.simulator.cost.measured.aic_import import BUNDLED, import_laws, load_laws
from specbatch.simulator.cost.measured.aic_laws import law_from_dict


def table(laws: dict) -> list[str]:
    """Markdown rows: system, version, family, group, rows, shapes, held-out MAPE and p90."""
    out = ["| GPU | vLLM | op | group | rows | shapes | law LOSO MAPE (p90) | "
           "transfer LOSO MAPE (p90) |", "|---|---|---|---|---|---|---|---|"]
    for system, (version, fitted) in sorted(laws.items()):
        for law in fitted:
            group = " ".join(str(v) for v in law.group.values())
            out.append(f"| {system} | {version} | {law.family} | {group} | {law.rows} | "
                       f"{law.shapes} | {100 * law.mape_loso:.1f} % ({100 * law.p90_loso:.0f} %) | "
                       f"{100 * law.mape_transfer:.1f} % ({100 * law.p90_transfer:.0f} %) |")
    return out


def summary(laws: dict, target: float = 0.08) -> list[str]:
    """Markdown rows per (GPU, op family): groups, the range of each estimator's held-out
    MAPE over the groups, and how many groups meet ``target``."""
    out = ["| GPU | vLLM | op | groups | law LOSO MAPE | transfer LOSO MAPE | groups <= "
           f"{100 * target:.0f} % (law / transfer) |", "|---|---|---|---|---|---|---|"]
    for system, (version, fitted) in sorted(laws.items()):
        for family in dict.fromkeys(law.family for law in fitted):
            group = [law for law in fitted if law.family == family]
            lo = [law.mape_loso for law in group]
            tr = [law.mape_transfer for law in group]
            out.append(f"| {system} | {version} | {family} | {len(group)} | "
                       f"{100 * min(lo):.1f}-{100 * max(lo):.1f} % | "
                       f"{100 * min(tr):.1f}-{100 * max(tr):.1f} % | "
                       f"{sum(v <= target for v in lo)} / {sum(v <= target for v in tr)} |")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tables", help="AIConfigurator's systems/data folder (refit)")
    ap.add_argument("--system", nargs="+", default=[], help="systems to refit")
    ap.add_argument("--vllm-version", help="vLLM version (default: newest full set)")
    ap.add_argument("--summary", action="store_true", help="one row per GPU and op family")
    args = ap.parse_args()
    if args.tables:
        result = import_laws(args.tables, tuple(args.system), args.vllm_version)
        laws = {name: (s["vllm_version"], [law_from_dict(d) for d in s["laws"]])
                for name, s in result["systems"].items()}
    else:
        laws = load_laws(BUNDLED)
    print("\n".join(summary(laws) if args.summary else table(laws)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
