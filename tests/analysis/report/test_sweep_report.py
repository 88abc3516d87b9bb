"""Reports: every figure the sweep's axes allow is a non-empty, linked PNG; tables are right.

The sweep runs the real SimConfig with a fast deterministic fake runner whose metrics have
known shapes (BV's MAL is exactly (1 + γ/100) times TV's), so the report's numbers can be
checked exactly.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from specbatch.analysis.report.replication import bv_gain_table
from specbatch.analysis.report.sweep_report import build_report
from specbatch.analysis.sweep.runner import read_results, run_sweep
from specbatch.analysis.sweep.spec import parse_spec

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def shaped_runner(config: dict):
    """Throughput rises with k, TETRIS a little above fixed, load raises latency."""
    policy, k, seed = config["policy"], config["num_speculative_tokens"], config["seed"]
    mal_tv = 1.0 if policy == "ar" else 1.0 + 0.6 * k / (1 + 0.2 * k)
    mal = mal_tv * (1 + k / 100) if config["verify"] == "block" and policy != "ar" else mal_tv
    tput = 1000.0 * mal * (1.04 if policy == "tetris" else 1.0) + 5 * seed
    e2e = 2e4 / tput * (1 + config["rate"] / 50) * (1 + config["max_num_seqs"] / 100)
    rng = np.random.default_rng(seed)
    requests = pd.DataFrame({"uid": np.arange(20), "arrival": np.zeros(20),
                             "first_token": rng.uniform(0.1, 0.2, 20),
                             "finish": e2e * rng.uniform(0.5, 1.5, 20)})
    summary = {"throughput": tput, "e2e_mean": e2e, "e2e_p50": e2e, "e2e_p99": 2 * e2e,
               "vsr": float("nan") if policy == "ar" else 0.6, "mal": mal, "requests": 20}
    return summary, requests


def grid_spec(arrival: str, load: str, levels: list) -> dict:
    return {
        "name": "report-test",
        "seeds": [0, 1, 2],
        "report": {"replicate": "tetris"},
        "base": {"trace": "synth", "requests": 20, "arrival": arrival},
        "axes": [
            {"policy": ["ar"], load: levels},
            {"policy": ["fixed"], "num_speculative_tokens": [1, 2, 3],
             "verify": ["token", "block"], load: levels},
            {"policy": ["dsd"], "num_speculative_tokens": [3], load: levels},
            {"policy": ["tetris"], "num_speculative_tokens": [1, 2, 3], "extra": [1],
             load: levels},
        ],
    }


# closed load (all requests at once, concurrency varies): throughput ranks settings
SPEC = grid_spec("burst", "max_num_seqs", [16, 64])
# open-loop load (Poisson arrivals at a fixed rate): throughput is the offered rate
OPEN_SPEC = grid_spec("poisson", "rate", [5.0, 20.0])


def open_runner(config: dict):
    """shaped_runner's latencies, but throughput = the offered rate (tokens per request x
    rate), with a hair more for fixed k = 1: ranking by throughput would pick k = 1, ranking
    by latency picks k = 3."""
    summary, requests = shaped_runner(config)
    bump = 1.001 if config["policy"] == "fixed" and config["num_speculative_tokens"] == 1 else 1.0
    summary = {**summary, "throughput": 100.0 * config["rate"] * bump + 0.01 * config["seed"],
               "tpot_mean": summary["e2e_mean"] / 100}
    return summary, requests


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
    per_context = {"throughput_vs_k", "e2e_vs_k", "vsr_mal", "latency_cdf", "bv_gain_vs_gamma"}
    # max_num_seqs is swept: one figure per value, except the across-load figure, which draws it
    assert set(linked) == {f"{name}_max_num_seqs-{n}.png" for name in per_context
                           for n in (16, 64)} | {"throughput_latency.png"}
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


def test_html_report_embeds_tables_and_images(sweep_dir, md_report, tmp_path):
    copy = shutil.copytree(sweep_dir, tmp_path / "sweep")  # md_report's folder stays as it is
    path = build_report(copy, fmt="html")
    text = open(path).read()
    assert path.endswith("report.html") and text.startswith("<!doctype html>")
    assert text.count("<table>") >= 3 and '<img src="throughput_vs_k_max_num_seqs-16.png"' in text
    assert not (copy / "report" / "report.md").exists()  # the report folder is replaced whole


def test_report_cli_on_a_non_sweep_directory_is_one_line_exit_2(tmp_path):
    result = subprocess.run([sys.executable, "-m", "specbatch", "report", str(tmp_path)],
                            capture_output=True, text=True)
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0 and "no sweep.json" in result.stderr


@pytest.fixture(scope="module")
def open_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("open")
    run_sweep(parse_spec(OPEN_SPEC, "open.toml"), out, runner=open_runner, progress=False)
    build_report(out, fmt="md")
    return out


def test_open_load_report_ranks_by_latency_per_rate_not_by_throughput(open_dir):
    text = (open_dir / "report" / "report.md").read_text()
    assert "(by throughput)" not in text
    assert "## Best setting of each policy at each rate (by mean e2e latency)" in text
    assert "throughput cannot rank settings" in text
    table = pd.read_csv(open_dir / "report" / "headline.csv")
    assert len(table) == 2 * 5 and set(table.rate) == {5.0, 20.0}
    fixed = table[table.policy == "fixed"]
    assert (fixed.k == 3).all()  # lowest latency, although k = 1 has the highest throughput
    for _, rows in table.groupby("rate"):
        assert rows.e2e_mean.is_monotonic_increasing  # ranked by latency within each rate
    assert {"tpot_mean", "e2e_vs_base", "served"} <= set(table.columns)
    assert np.allclose(table[table.policy == "ar"].e2e_vs_base, 0.0)
    header = next(line for line in text.splitlines() if line.startswith("| rate | policy"))
    assert "TPOT" in header and "e2e vs ar" in header and "speedup" not in header


def test_open_load_figures_name_their_rate_and_skip_throughput_rankings(open_dir):
    text = (open_dir / "report" / "report.md").read_text()
    captions = re.findall(r"!\[([^\]]*)\]\(([^)]+\.png)\)", text)
    linked = {name for _, name in captions}
    assert not any(name.startswith(("throughput_vs_k", "throughput_latency")) for name in linked)
    assert {"latency_vs_rate.png", "latency_cdf.png"} <= linked  # these draw every rate
    assert {f"{name}_rate-{r}.png" for name in ("e2e_vs_k", "vsr_mal") for r in (5, 20)} <= linked
    for caption, name in captions:
        assert "rate" in caption, name  # every figure says which rate(s) it shows
        data = (open_dir / "report" / name).read_bytes()
        assert data[:8] == PNG_MAGIC and len(data) > 10_000, name
    assert "by throughput" not in " ".join(c for c, _ in captions)


def test_open_load_tetris_section_compares_at_every_rate_by_latency(open_dir):
    text = (open_dir / "report" / "report.md").read_text()
    assert "## TETRIS vs standard SD and DSD at each rate (by latency)" in text
    assert "up to -9.32" not in text  # the paper's closed-load numbers are not comparable
    section = text.split("## TETRIS vs standard SD and DSD at each rate")[1].split("\n## ")[0]
    rows = [line for line in section.splitlines() if line.startswith("| 5.000") or
            line.startswith("| 20.000")]
    assert len(rows) == 2 * 3  # (best fixed k, DSD, best baseline) at each of the two rates
    from specbatch.analysis.report.replication import tetris_by_context

    table = tetris_by_context(read_results(open_dir))
    fixed = table[table.vs == "best fixed k"]
    assert fixed.rate.tolist() == [5.0, 20.0] and (fixed["baseline k"] == 3).all()
    assert all(cell.startswith("-3.") for cell in fixed["e2e mean change (%)"])  # 1/1.04 - 1


def test_closed_load_report_names_the_context_of_its_single_context_tables(md_report):
    text = open(md_report).read()
    section = text.split("## TETRIS vs standard SD and DSD")[1].split("\n## ")[0]
    assert "max_num_seqs = 16" in section


def paged_runner(config: dict):
    """shaped_runner under a paged KV cache: tp 1 preempts (more at larger k), tp 2 does not."""
    summary, requests = shaped_runner(config)
    pressure = (
        0 if config["tp"] > 1 else 100 + 10 * config["num_speculative_tokens"] + config["seed"]
    )
    return {**summary, "kv_mode": "paged", "kv_capacity": 4244 if config["tp"] == 1 else 49143,
            "preemptions": pressure, "recomputed_tokens": 180 * pressure}, requests


@pytest.fixture(scope="module")
def paged_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("paged")
    spec = {"name": "paged", "seeds": [0, 1],
            "base": {"trace": "synth", "requests": 20, "arrival": "burst", "kv_mode": "paged"},
            "axes": [{"policy": ["ar"], "tp": [1, 2]},
                     {"policy": ["fixed"], "num_speculative_tokens": [1, 2, 3], "tp": [1, 2]}]}
    run_sweep(parse_spec(spec, "paged.toml"), out, runner=paged_runner, progress=False)
    build_report(out, fmt="md")
    return out


def test_paged_report_shows_kv_mode_capacity_preemptions_and_recomputation(paged_dir):
    text = (paged_dir / "report" / "report.md").read_text()
    section = text.split("## KV cache pressure")[1].split("\n## ")[0]
    assert "paged mode" in section and "tp = 1: 4,244 tokens; tp = 2: 49,143 tokens" in section
    assert "8 of 16 runs preempted requests" in section  # the tp = 1 runs
    assert "at most 131 preemptions and 23,580 recomputed tokens in one run" in section
    row = next(line for line in section.splitlines() if line.startswith("| 1 | fixed"))
    assert row.rstrip(" |").split(" | ")[5:10] == ["4,244", "130.5", "131", "23,490.0", "23,580"]
    assert "Varying context (tp = 1, 2)" in text


def test_every_swept_context_gets_its_own_figures(paged_dir):
    text = (paged_dir / "report" / "report.md").read_text()
    captions = re.findall(r"!\[([^\]]*)\]\(([^)]+\.png)\)", text)
    for tp in (1, 2):
        drawn = {name for caption, name in captions if f"(at tp = {tp})" in caption}
        assert {f"throughput_vs_k_tp-{tp}.png", f"vsr_mal_tp-{tp}.png"} <= drawn
    for caption, name in captions:
        assert "tp = " in caption, name  # no figure silently shows one tp
        assert (paged_dir / "report" / name).read_bytes()[:8] == PNG_MAGIC


def test_contexts_beyond_the_cap_are_named_not_dropped_silently(tmp_path, monkeypatch):
    from specbatch.analysis.report import sweep_report as report
    monkeypatch.setattr(report, "MAX_FACETS", 1)
    spec = {"name": "cap", "seeds": [0],
            "base": {"trace": "synth", "requests": 20, "arrival": "burst"},
            "axes": [{"policy": ["ar", "fixed"], "num_speculative_tokens": [1, 2],
                      "max_num_seqs": [16, 32, 64]}]}
    run_sweep(parse_spec(spec, "cap.toml"), tmp_path, runner=shaped_runner, progress=False)
    text = open(build_report(tmp_path)).read()
    assert ("figures are drawn for the first 1 only, not for: max_num_seqs = 32; "
            "max_num_seqs = 64") in text


def test_vsr_mal_labels_fit_and_say_what_picked_the_settings(sweep_dir):
    from specbatch.analysis.report.compare import best_settings
    from specbatch.analysis.report.figures import draw_vsr_mal

    df = read_results(sweep_dir)
    best = best_settings(df[df.max_num_seqs == 16], "throughput")
    fig = draw_vsr_mal(best[best.policy != "ar"], "throughput")
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    frame = fig.bbox
    for ax in fig.axes:
        assert ax.get_xlabel() == "Policy (best setting by throughput (tokens/s))"
        assert ax.get_legend() is None  # the legend sits above the panels, not over bars
        boxes = [t.get_window_extent(renderer) for t in ax.get_xticklabels() if t.get_text()]
        assert all(not a.overlaps(b) for a, b in zip(boxes, boxes[1:]))
        for text in (ax.xaxis.label, ax.yaxis.label):  # nothing clipped at the edges
            box = text.get_window_extent(renderer)
            assert box.x0 >= frame.x0 and box.x1 <= frame.x1 and box.y0 >= frame.y0
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["token verification",
                                                                   "block verification"]
    import matplotlib.pyplot as plt

    plt.close(fig)


def verify_runner(config: dict):
    """shaped_runner with the sampler's share of step time: 1 % (TV) or 2 % (BV), + seed/1000."""
    summary, requests = shaped_runner(config)
    share = (0.01 if config["verify"] == "token" else 0.02) + config["seed"] / 1000
    return {**summary, "verify_time": share, "verify_share": share}, requests


def test_report_states_the_verification_share_per_rule(tmp_path):
    spec = {"name": "verify", "seeds": [0, 1],
            "base": {"trace": "synth", "requests": 20, "arrival": "burst", "verify_cost": "torch"},
            "axes": [{"policy": ["fixed"], "num_speculative_tokens": [2, 3],
                      "verify": ["token", "block"]}]}
    run_sweep(parse_spec(spec, "verify.toml"), tmp_path, runner=verify_runner, progress=False)
    build_report(tmp_path, fmt="md")
    text = (tmp_path / "report" / "report.md").read_text()
    section = text.split("## Verification time")[1].split("\n## ")[0]
    assert "verify_cost = torch" in section
    assert "block 2.00-2.10 %; token 1.00-1.10 %" in section


def test_a_sweep_without_verification_time_has_no_such_section(md_report):
    text = open(md_report).read()  # the shaped runner reports no sampler time
    assert "## Verification time" not in text and "## Best setting" in text
