"""Every command that reads a trace answers a damaged one with one line and exit 2: a Z
outside its THEORY.md §3 window, a meta.json of the wrong shape, a FIFO in place of meta.json
(which must not block)."""

from __future__ import annotations

import json
import os
import re

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from specbatch.cli import main
from specbatch.traces.format.files import write_trace
from specbatch.traces.synth import SynthConfig, synth_trace
from tests.test_inputs import call_within


def flip_z(path) -> None:
    """Raise one Z far above ``p_i (1 − pt) + max(0, p_i pt − q)``, staying inside [0, 1]."""
    file = path / "positions-00000.parquet"
    table = pq.read_table(file)
    z = table.column("z").combine_chunks()
    k = z.type.list_size
    flat = z.flatten().to_numpy().copy()
    i = int(np.argmin(flat[k:])) + k  # a small Z, not the first row
    flat[i] = min(flat[i] + 0.5, 1.0)
    column = pa.FixedSizeListArray.from_arrays(pa.array(flat), k)
    pq.write_table(table.set_column(table.column_names.index("z"), "z", column), file)


def rewrite_meta(change):
    def damage(path) -> None:
        meta = json.loads((path / "meta.json").read_text())
        (path / "meta.json").write_text(json.dumps(change(meta)))
    return damage


def fifo_meta(path) -> None:
    os.unlink(path / "meta.json")
    os.mkfifo(path / "meta.json")


DAMAGES = {
    "z outside its window": (flip_z, r"field z: expected Z_"),
    "completion is a string": (rewrite_meta(lambda m: {**m, "completion": "done"}),
                               r"field completion: expected an object or null"),
    "meta.json is a list": (rewrite_meta(lambda m: [m]), r"meta\.json: expected a JSON object"),
    "meta.json is a FIFO": (fifo_meta, r"meta\.json: expected the trace's meta\.json \(a regular "
                                       r"file\), got a FIFO"),
}


def commands(trace, tmp) -> dict[str, list[str]]:
    spec = tmp / "spec.toml"
    spec.write_text(f'[base]\ntrace = "{trace}"\nrequests = 4\nmax_num_seqs = 2\n'
                    '[axes]\nk = [1, 2]\n')
    return {
        "validate": ["trace", "validate", str(trace)],
        "info": ["trace", "info", str(trace)],
        "simulate": ["simulate", "--trace", str(trace), "--requests", "4"],
        "sweep": ["sweep", str(spec), "--out", str(tmp / "sweep"), "--workers", "1",
                  "--no-progress"],
        "demo": ["demo", "--trace", str(trace), "--quick", "--out", str(tmp / "demo"),
                 "--workers", "1"],
    }


@pytest.fixture(scope="module")
def small():
    return synth_trace(SynthConfig(requests=6, depth=3, output_mean=10, vocab=8, seed=4))


@pytest.mark.parametrize("command", ["validate", "info", "simulate", "sweep", "demo"])
@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_a_damaged_trace_is_one_line_and_exit_2(tmp_path, capsys, small, damage, command):
    trace = tmp_path / "trace"
    write_trace(small, trace)
    make, message = DAMAGES[damage]
    make(trace)
    code = call_within(60, main, commands(trace, tmp_path)[command])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err  # nothing printed before the error (demo's banner)
    assert err[-1].startswith("specbatch: error: ")
    assert re.search(message, err[-1]), err[-1]
