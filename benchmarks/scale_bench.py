"""Simulator scale: peak RSS and wall time of ``specbatch simulate`` for 10^4..10^7 requests.

Each size runs, under the default scheduler (``vllm-v1``: one token budget per step, reserve
KV), an imported workload CSV (written once per size under ``--work``, seeded):
prompts lognormal (median 200 tokens, σ 0.8, clipped to [8, 2048]), outputs uniform in
8..256 tokens, Poisson arrivals at ``--rate`` req/s (the file's ``arrival`` column, replayed
with ``--arrival trace``), mapped onto the bundled default trace, whose requests are shorter
than most of these outputs (so positions wrap, simulator.workload.arrivals). Every run is its own
``specbatch simulate ... --out DIR --json`` process, so its peak RSS (its own ``ru_maxrss``)
includes start-up, the engine and writing the tables; its time is given in wall and CPU
seconds (user + system: the steadier figure on a shared machine) and as CPU microseconds per
request (flat across sizes when the time is linear).

``--baseline DIR`` also runs another implementation, a source tree such as ``git archive
<commit> | tar -x -C DIR``, on the sizes up to ``--baseline-max-requests`` (the
implementation that copied every wrapped position's trace row needed ~55 KB per request at
these lengths, 5.8 GB for 10^5; more would take the machine's memory) under an
address-space cap, and prints the ratios of the two in the same run.

``--sample-s S`` also samples each run's RSS, CPU seconds and finished requests every S
seconds (its progress bar), and ``--time-limit-s T`` stops a run after T wall seconds: a run
too long for the machine still shows its memory over time and its CPU per finished request.

Usage: .venv/bin/python benchmarks/scale_bench.py [--sizes 10000,100000,1000000] [--huge]
       [--baseline DIR] [--sample-s S] [--time-limit-s T] [--json]
``--huge`` adds 10^7 requests (~1 h of CPU at ~0.37 ms a request; the step table, ~2.6
steps a request, streams to steps.parquet one row group at a time, simulator.step_stream, so
what the run holds is ~150 bytes a request of workload and result arrays).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

#: The packages of one source tree and the folders they live in (pyproject's package-dir).
PACKAGE_DIRS = {"theory": "theory", "traces": "traces", "simulator": "simulator",
                "live": "live", "analysis": "analysis"}


def write_workload(path: Path, n: int, rate: float, seed: int = 0) -> Path:
    """A workload CSV of ``n`` requests (module docstring), written in chunks so that the
    generator itself stays small at 10^7 rows."""
    rng = np.random.default_rng(seed)
    chunk, t0 = 1_000_000, 0.0
    with open(path, "w") as f:
        f.write("prompt_len,output_len,arrival\n")
        for start in range(0, n, chunk):
            m = min(chunk, n - start)
            prompt = np.clip(np.rint(rng.lognormal(np.log(200), 0.8, m)), 8, 2048).astype(np.int64)
            output = rng.integers(8, 257, size=m)
            arrival = t0 + np.cumsum(rng.exponential(1.0 / rate, m))
            t0 = float(arrival[-1])
            np.savetxt(f, np.column_stack([prompt, output, arrival]),
                       fmt=["%d", "%d", "%.6f"], delimiter=",")
    return path


def source_tree(src: Path, work: Path) -> Path:
    """A folder to put on PYTHONPATH so that ``import specbatch`` loads the source tree
    ``src`` (symlinks laid out as the installed namespace)."""
    root = work / f"path-{abs(hash(str(src.resolve())))}"
    pkg = root / "specbatch"
    if not pkg.exists():
        pkg.mkdir(parents=True)
        for item in (src / "specbatch").iterdir():
            (pkg / item.name).symlink_to(item.resolve())
        for name, folder in PACKAGE_DIRS.items():
            (pkg / name).symlink_to((src / folder).resolve())
    return root


#: Where a child runs: ``python -c`` puts its working folder first on sys.path, so a child
#: started in the repository root imports that checkout's ``specbatch/`` (and, through it,
#: the installed packages) whatever PYTHONPATH says: a ``--baseline`` run would measure this
#: tree. The arguments' paths are absolute (:func:`main` resolves ``--work``).
CHILD_CWD = tempfile.gettempdir()

#: The child process of :func:`run_cli`: runs the CLI, then reports its own resource usage
#: (peak RSS, CPU seconds) as the last line of stderr.
CHILD = """
import json, resource, sys
from specbatch.cli import main
try:
    rc = main(sys.argv[1:])
except SystemExit as exc:
    rc = exc.code
u = resource.getrusage(resource.RUSAGE_SELF)
print("RUSAGE " + json.dumps({"rss_mib": u.ru_maxrss / 1024, "cpu_s": u.ru_utime + u.ru_stime}),
      file=sys.stderr)
raise SystemExit(rc)
"""


def run_cli(args: list[str], python_path: Path | None = None,
            max_bytes: int | None = None, sample_s: float | None = None,
            time_limit_s: float | None = None) -> dict:
    """One ``specbatch ARGS`` process (``python_path``: import specbatch from there;
    ``max_bytes``: its address-space cap). Returns rc, wall_s, cpu_s, rss_mib (its own peak),
    tokens and tokens_per_s (per wall second) and tokens_per_cpu_s, or an error line.

    sample_s: also read the child's RSS, CPU seconds and finished requests (its progress
    bar, so the run is then not ``--json``: the tokens come from its ``--out`` summary.json)
    every so many seconds, as ``samples`` rows (wall_s, rss_mib, cpu_s, finished).
    time_limit_s: stop the child after so many wall seconds (``partial``: true; the samples
    say how far it got)."""
    env = dict(os.environ, SPECBATCH_ALLOW_LARGE="1")
    if python_path is not None:
        env["PYTHONPATH"] = str(python_path)

    def cap() -> None:
        if max_bytes is not None:
            resource.setrlimit(resource.RLIMIT_AS, (max_bytes, max_bytes))

    flags = [] if sample_s else ["--json"]
    row: dict = {}
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        start = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-c", CHILD, *args, *flags], env=env,
                                stdout=out, stderr=err, text=True, preexec_fn=cap,
                                cwd=CHILD_CWD)
        samples = []
        while True:
            try:
                proc.wait(timeout=sample_s or time_limit_s)
                break
            except subprocess.TimeoutExpired:
                wall = time.perf_counter() - start
                if sample_s:
                    samples.append(sample(proc.pid, wall, err))
                if time_limit_s is not None and wall >= time_limit_s:
                    proc.kill()
                    proc.wait()
                    row["partial"] = True
                    break
        row.update(rc=proc.returncode, wall_s=time.perf_counter() - start)
        if sample_s:
            row["samples"] = samples
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    lines = stderr.strip().splitlines()
    if lines and lines[-1].startswith("RUSAGE "):
        row.update(json.loads(lines.pop()[len("RUSAGE "):]))
    if proc.returncode == 0:
        summary = (json.loads(stdout) if not sample_s
                   else json.loads((Path(args[args.index("--out") + 1]) / "summary.json")
                                   .read_text()))
        row["tokens"] = summary["tokens"]
        row["tokens_per_s"] = row["tokens"] / row["wall_s"]
        row["tokens_per_cpu_s"] = row["tokens"] / row["cpu_s"]
    else:
        row["error"] = (lines[-1][-200:] if lines and not row.get("partial")
                        else f"stopped after {time_limit_s} s" if row.get("partial")
                        else f"killed (exit status {proc.returncode})")
    return row


def sample(pid: int, wall: float, err) -> dict:
    """The child's RSS (MiB), CPU seconds and finished requests (the last count of its
    progress bar on stderr, 0 before the first) now."""
    status = Path(f"/proc/{pid}/status").read_text()
    rss = next((int(line.split()[1]) / 1024 for line in status.splitlines()
                if line.startswith("VmRSS")), 0.0)
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime
    err.flush()
    fd = err.fileno()  # the bar's last 4 KiB as bytes: a text-mode seek may land inside a
    size = os.fstat(fd).st_size  # multi-byte character of the bar (tqdm's block glyphs)
    tail = os.pread(fd, 4096, max(0, size - 4096)).decode("utf-8", errors="replace")
    counts = re.findall(r"(\d+)/\d+ \[", tail)
    return {"wall_s": round(wall, 1), "rss_mib": round(rss, 1), "cpu_s": cpu,
            "finished": int(counts[-1]) if counts else 0}


def simulate_args(csv: Path, n: int, out: Path) -> list[str]:
    """The measured command: the workload file replayed with its own arrival times."""
    return ["simulate", "--workload", str(csv), "--requests", str(n), "--arrival", "trace",
            "--out", str(out), "--force"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--huge", action="store_true", help="add 10^7 requests")
    parser.add_argument("--rate", type=float, default=10.0, help="arrivals per second")
    parser.add_argument("--baseline", type=Path, default=None,
                        help="source tree of the implementation to compare against")
    parser.add_argument("--baseline-max-requests", type=int, default=100_000)
    parser.add_argument("--baseline-max-gib", type=float, default=8.0,
                        help="address-space cap of a baseline run")
    parser.add_argument("--work", type=Path, default=None, help="folder for workloads/results")
    parser.add_argument("--sample-s", type=float, default=None,
                        help="sample each run's RSS, CPU and finished requests this often")
    parser.add_argument("--time-limit-s", type=float, default=None,
                        help="stop a run after this many wall seconds (reported as partial)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    if args.huge:
        sizes.append(10_000_000)
    work = (args.work or Path(tempfile.mkdtemp(prefix="scale_bench_"))).resolve()
    work.mkdir(parents=True, exist_ok=True)
    base_path = source_tree(args.baseline, work) if args.baseline is not None else None
    rows = []
    for n in sizes:
        csv = work / f"workload-{n}.csv"
        if not csv.exists():
            write_workload(csv, n, args.rate)
        row = {"requests": n, "this": run_cli(simulate_args(csv, n, work / f"out-{n}"),
                                              sample_s=args.sample_s,
                                              time_limit_s=args.time_limit_s)}
        if "cpu_s" in row["this"]:
            row["this"]["cpu_us_per_request"] = 1e6 * row["this"]["cpu_s"] / n
        if base_path is not None and n <= args.baseline_max_requests:
            row["baseline"] = run_cli(simulate_args(csv, n, work / f"base-{n}"), base_path,
                                      int(args.baseline_max_gib * 2**30))
            if "cpu_s" in row["baseline"]:
                row["baseline"]["cpu_us_per_request"] = 1e6 * row["baseline"]["cpu_s"] / n
        rows.append(row)
        if not args.json:
            print(_line(row), flush=True)
    if args.json:
        print(json.dumps({"work": str(work), "rows": rows}))
    return 0


def _line(row: dict) -> str:
    """One table line: this implementation's wall/RSS/tok/s, the baseline's, the ratios."""
    def cell(r: dict | None) -> str:
        if r is None:
            return f"{'-':>30}"
        if r.get("partial") and r.get("samples"):
            last = r["samples"][-1]
            peak = max(x["rss_mib"] for x in r["samples"])
            return (f"stopped at {r['wall_s']:.0f} s: {last['finished']:,} finished, "
                    f"{last['cpu_s']:.0f} CPU s, sampled peak {peak:.0f} MiB")
        if r.get("rc") != 0:
            return f"{'failed: ' + str(r.get('error'))[:40]:>30}"
        return (f"{r['wall_s']:>7.1f} s ({r['cpu_s']:>6.1f} CPU s, "
                f"{r['cpu_us_per_request']:>5.0f} us/request) {r['rss_mib']:>6.0f} MiB "
                f"{r['tokens_per_s']:>9,.0f} tok/s")

    this, base = row["this"], row.get("baseline")
    ratio = ""
    if base is not None and base.get("rc") == 0 and this.get("rc") == 0:
        ratio = (f"  baseline/this: RSS {base['rss_mib'] / this['rss_mib']:.1f}x, "
                 f"wall {base['wall_s'] / this['wall_s']:.2f}x, "
                 f"CPU {base['cpu_s'] / this['cpu_s']:.2f}x")
    return f"{row['requests']:>10,} this {cell(this)}   baseline {cell(base)}{ratio}"


if __name__ == "__main__":
    raise SystemExit(main())
