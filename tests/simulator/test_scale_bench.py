"""benchmarks/scale_bench.py stays runnable (slow: two simulate processes)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from tests.benchmark_module import load_benchmark

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "scale_bench.py"


def load():
    return load_benchmark(BENCH.name)


def test_generated_workload_has_the_documented_shape(tmp_path):
    table = pd.read_csv(load().write_workload(tmp_path / "w.csv", 5000, rate=10.0))
    assert list(table.columns) == ["prompt_len", "output_len", "arrival"] and len(table) == 5000
    assert table["output_len"].between(8, 256).all() and table["prompt_len"].between(8, 2048).all()
    assert (table["arrival"].diff().dropna() >= 0).all()
    assert abs(len(table) / table["arrival"].iloc[-1] - 10.0) < 1.0  # Poisson at the rate


@pytest.mark.slow
def test_scale_bench_measures_each_run_in_its_own_process(tmp_path, capsys):
    module = load()
    assert module.main(["--sizes", "300", "--work", str(tmp_path), "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["rows"]
    this = row["this"]
    assert row["requests"] == 300 and this["rc"] == 0 and this["tokens"] > 300
    assert this["rss_mib"] > 0 and this["cpu_s"] > 0
    assert this["cpu_us_per_request"] == 1e6 * this["cpu_s"] / 300
    assert (tmp_path / "out-300" / "steps.parquet").is_file()


def test_a_sample_reads_rss_cpu_and_the_progress_bar_s_last_count(tmp_path):
    import os

    with open(tmp_path / "err", "w+") as err:
        err.write("simulate:   1%|  | 51100/10000000 [01:37<5:27:09]\rsimulate:   1%|  | "
                  "51208/10000000 [01:38<5:31:32]")
        got = load().sample(os.getpid(), 12.34, err)
    assert got["finished"] == 51208 and got["wall_s"] == 12.3
    assert got["rss_mib"] > 10 and got["cpu_s"] > 0


def test_a_sample_survives_a_tail_that_starts_inside_a_multi_byte_glyph(tmp_path):
    """tqdm draws its bar with 3-byte block glyphs: the last 4 KiB of the log may begin in the
    middle of one (a 10^7 run's sampler once died there with a UnicodeDecodeError)."""
    import os

    bar = "simulate:  50%|" + "\u2588" * 40 + "| 5000123/10000000 [1:02:03<1:02:03]\r"
    with open(tmp_path / "err", "w+", encoding="utf-8") as err:
        err.write("x" + bar * 200)  # 4096 is not a multiple of 3 bytes from the end
        err.flush()
        assert (os.path.getsize(tmp_path / "err") - 4096) % len(bar.encode()) != 0
        got = load().sample(os.getpid(), 1.0, err)
    assert got["finished"] == 5000123


def test_a_baseline_child_imports_the_baseline_tree(tmp_path):
    """The child's working folder must not shadow PYTHONPATH (``python -c`` puts it first):
    started from the repository root, a baseline run imported this checkout."""
    import os
    import subprocess
    import sys

    module = load()
    src = tmp_path / "base"
    for name in ("specbatch", *module.PACKAGE_DIRS.values()):
        (src / name).mkdir(parents=True)
        (src / name / "__init__.py").write_text(f"WHO = 'baseline {name}'\n")
    path = module.source_tree(src, tmp_path)
    out = subprocess.run([sys.executable, "-c", "import specbatch.simulator as s; print(s.WHO)"],
                         env=dict(os.environ, PYTHONPATH=str(path)), cwd=module.CHILD_CWD,
                         capture_output=True, text=True, check=True).stdout
    assert out.strip() == "baseline simulator"
