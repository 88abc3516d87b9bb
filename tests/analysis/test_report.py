"""Reports: every figure the sweep's axes allow is a non-empty, linked PNG; tables are right.

The sweep runs the real SimConfig with a fast deterministic fake runner whose metrics have
known shapes (BV's MAL is exactly (1 + γ/100) times TV's), so the report's numbers can be
checked exactly.
"""

from __future__ import annotations

import re
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from specbatch.analysis.replication import bv_gain_table
from specbatch.analysis.report import build_report
from specbatch.analysis.spec import parse_spec
from specbatch.analysis.sweep import read_results, run_sweep

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def shaped_runner(config: dict):
    """Throughput rises with k, TETRIS a little above fixed, load raises latency."""
    policy, k, seed = config["policy"], config["num_speculative_tokens"], config["seed"]
    mal_tv = 1.0 if policy == "ar" else 1.0 + 0.6 * k / (1 + 0.2 * k)
    mal = mal_tv * (1 + k / 100) if config["verify"] == "block" and policy != "ar" else mal_tv
    tput = 1000.0 * mal * (1.04 if policy == "tetris" else 1.0) + 5 * seed
    e2e = 2e4 / tput * (1 + config["rate"] / 50)
    rng = np.random.default_rng(seed)
    requests = pd.DataFrame({"uid": np.arange(20), "arrival": np.zeros(20),
                             "first_token": rng.uniform(0.1, 0.2, 20),
                             "finish": e2e * rng.uniform(0.5, 1.5, 20)})
    summary = {"throughput": tput, "e2e_mean": e2e, "e2e_p50": e2e, "e2e_p99": 2 * e2e,
               "vsr": float("nan") if policy == "ar" else 0.6, "mal": mal, "requests": 20}
    return summary, requests


SPEC = {
    "name": "report-test",
    "seeds": [0, 1, 2],
    "report": {"replicate": "tetris"},
    "base": {"trace": "synth", "requests": 20, "arrival": "poisson"},
    "axes": [
        {"policy": ["ar"], "rate": [5.0, 20.0]},
        {"policy": ["fixed"], "num_speculative_tokens": [1, 2, 3], "verify": ["token", "block"],
         "rate": [5.0, 20.0]},
        {"policy": ["dsd"], "num_speculative_tokens": [3], "rate": [5.0, 20.0]},
        {"policy": ["tetris"], "num_speculative_tokens": [1, 2, 3], "extra": [1],
         "rate": [5.0, 20.0]},
    ],
}


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep")
    run_sweep(parse_spec(SPEC, "report-test.toml"), out, runner=shaped_runner, progress=False)
    return out


@pytest.fixture(scope="module")
def md_report(sweep_dir):
    return build_report(sweep_dir, fmt="md")


def test_report_links_every_figure_and_each_is_a_nonempty_png(sweep_dir, md_report):
    text = open(md_report).read()
    linked = re.findall(r"!\[[^\]]*\]\(([^)]+\.png)\)", text)
    assert set(linked) == {"throughput_vs_k.png", "e2e_vs_k.png", "vsr_mal.png",
                           "latency_cdf.png", "throughput_latency.png", "bv_gain_vs_gamma.png"}
    for name in linked:
        data = (sweep_dir / "report" / name).read_bytes()
        assert data[:8] == PNG_MAGIC and len(data) > 10_000, name
    assert (sweep_dir / "report" / "headline.csv").stat().st_size > 0


def test_report_headline_and_replication_sections(md_report):
    text = open(md_report).read()
    assert "## Best setting of each policy (by throughput)" in text
    assert "## TETRIS vs standard SD and DSD" in text
    assert "up to -9.32" in text and "up to -6.13" in text and "up to +9.00" in text
    assert "Setting differences" in text  # replicate = "tetris" explains how we differ
    assert "## Metric definitions" in text and "**VSR**" in text


def test_headline_csv_has_one_best_row_per_policy_verifier_and_load(sweep_dir, md_report):
    table = pd.read_csv(sweep_dir / "report" / "headline.csv")
    assert len(table) == 2 * 5  # (ar, fixed TV/BV, dsd, tetris) x two rates
    fixed = table[(table.policy == "fixed") & (table.verify == "block")]
    assert (fixed.k == 3).all()  # throughput rises with k
    assert np.allclose(table[table.policy == "ar"].speedup, 1.0)


def test_bv_gain_table_recovers_the_paired_relative_gain(sweep_dir):
    gains = bv_gain_table(read_results(sweep_dir))
    assert gains.gamma.tolist() == [1, 2, 3]
    assert np.allclose(gains.mal_gain, [1.0, 2.0, 3.0])  # exactly k percent by construction
    assert np.allclose(gains.mal_high - gains.mal_low, 0.0, atol=1e-9)


def test_html_report_embeds_tables_and_images(sweep_dir, md_report):
    path = build_report(sweep_dir, fmt="html")
    text = open(path).read()
    assert path.endswith("report.html") and text.startswith("<!doctype html>")
    assert text.count("<table>") >= 3 and '<img src="throughput_vs_k.png"' in text


def test_report_cli_on_a_non_sweep_directory_is_one_line_exit_2(tmp_path):
    result = subprocess.run([sys.executable, "-m", "specbatch", "report", str(tmp_path)],
                            capture_output=True, text=True)
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0 and "no sweep.json" in result.stderr
