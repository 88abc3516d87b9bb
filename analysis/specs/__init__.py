"""Bundled sweep specs (TOML, format in :mod:`analysis.sweep.runner`).

- ``tetris.toml``: TETRIS vs standard SD (fixed k = 1..6) vs DSD vs ``ar`` on the
  temperature-0 bundled trace (``tiny-t0``) in the TETRIS paper's setting (512 requests
  at once, 64 running, Vicuna-33B-shaped target on one H100, roofline cost model, token
  verification); the report prints our relative throughput and e2e latency beside the
  paper's.
- ``block_gamma.toml``: block vs token verification for γ = 1..8 on the temperature-1
  default trace (the block paper's γ sweep; at temperature 0 BV equals TV exactly).
- ``load.toml``: throughput vs latency across Poisson arrival rates.
- ``engines.toml``: the engines' draft-length policies (vllm-dynamic, batch-schedule,
  ema-adaptive, specdec++, entropy-stop) against fixed k, TETRIS, the oracle and hindsight
  on the bundled real traces, one calibration split for all; the report pairs each policy's
  best setting with the best fixed k (analysis.report.engine_comparison).

Run one with ``specbatch sweep analysis/specs/tetris.toml --out runs/tetris --report``.
"""

from pathlib import Path

SPECS_DIR = Path(__file__).parent


def spec_path(name: str) -> Path:
    """Path of a bundled spec by stem (``"tetris"``) or file name."""
    return SPECS_DIR / (name if name.endswith(".toml") else f"{name}.toml")
