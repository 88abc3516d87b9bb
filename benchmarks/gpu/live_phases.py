"""Where a live run and its simulated replay part ways: step time by batch phase (issue 16 §4).

``specbatch validate LIVE_DIR --out SIM_DIR`` writes the simulated step table of the same
trajectory (same steps, same accepted lengths). This script splits the aligned steps into the
phase where the whole static batch is running (``batch == N``) and the phase after the first
requests finished (``0 < batch < N``) and prints, per phase, the summed measured and simulated
step time and the relative error of the draft and target times.

    specbatch validate LIVE_DIR --out SIM_DIR
    python benchmarks/gpu/live_phases.py LIVE_DIR SIM_DIR [LIVE_DIR SIM_DIR ...] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd


def phases(live_dir: str, sim_dir: str) -> dict:
    m = pd.read_parquet(Path(live_dir) / "steps.parquet")
    s = pd.read_parquet(Path(sim_dir) / "steps.parquet")
    if len(m) != len(s):
        raise SystemExit(f"{live_dir}: {len(m)} measured steps, {len(s)} simulated: not aligned")
    full = int(m["batch"].max())
    lm = (m["end"] - m["time"]).to_numpy()
    ls = (s["end"] - s["time"]).to_numpy()
    out = {"live_dir": str(live_dir), "batch": full}
    for name, sel in (("full_batch", (m["batch"] == full).to_numpy()),
                      ("shrinking", ((m["batch"] < full) & (m["batch"] > 0)).to_numpy()),
                      ("all", np.ones(len(m), bool))):
        row = {"steps": int(sel.sum()), "measured_s": float(lm[sel].sum()),
               "simulated_s": float(ls[sel].sum())}
        row["step_time_error"] = row["simulated_s"] / row["measured_s"] - 1
        for col in ("draft_time", "target_time"):
            row[col + "_error"] = float(s[col][sel].sum() / m[col][sel].sum() - 1)
        out[name] = row
    return out


def main(argv=None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("dirs", nargs="+", help="LIVE_DIR SIM_DIR pairs")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    if len(args.dirs) % 2:
        p.error("expected LIVE_DIR SIM_DIR pairs")
    rows = [phases(a, b) for a, b in zip(args.dirs[::2], args.dirs[1::2])]
    for r in rows:
        print(r["live_dir"])
        for name in ("full_batch", "shrinking", "all"):
            x = r[name]
            print(f"  {name:<11}{x['steps']:>4} steps  measured {x['measured_s']:7.3f} s  "
                  f"simulated {x['simulated_s']:7.3f} s  error {100 * x['step_time_error']:+6.1f}%"
                  f"  (draft {100 * x['draft_time_error']:+6.1f}%, target "
                  f"{100 * x['target_time_error']:+6.1f}%)")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
    return rows


if __name__ == "__main__":
    main()
