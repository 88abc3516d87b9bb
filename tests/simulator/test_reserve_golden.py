"""Reserve-at-admission mode (``kv_mode = "reserve"``, the default) under the vllm-v0 step
composer is pinned byte for byte.

The digests in ``GOLDEN`` were computed by the engine before paged KV existed (every column of
the request and step tables it wrote then, and every summary key it reported then), so any
change to the reserve path's admission, prefill, decode, pricing or retirement shows up here.
That engine priced no verification: ``verify_cost = "none"`` must reproduce it bit for bit.
``GOLDEN_VERIFY`` pins the default (the fused sampler's verification time in every decode
step, simulator.cost.verify_cost), with the ``verify_time`` column and summary keys added. Run this
module as a script to print the digests of the current engine.
"""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

from specbatch.simulator.config.sim_config import load_config
from specbatch.simulator.cost.registry import build_cost_model
from specbatch.simulator.run import simulate
from specbatch.traces.synth import SynthConfig, synth_trace
from tests.simulator.helpers import LinearCost

#: The tables' columns and the summary's keys as the engine wrote them before paged KV.
REQUEST_COLUMNS = ("uid", "trace_index", "replica", "prompt_len", "output_len", "arrival",
                   "first_token", "finish", "tokens", "steps", "drafted", "verified", "accepted")
STEP_COLUMNS = ("replica", "time", "end", "batch", "prefill_tokens", "drafted", "verified",
                "accepted", "emitted", "depth", "draft_time", "target_time", "overhead_time")
SUMMARY_KEYS = ("throughput", "e2e_mean", "e2e_p50", "e2e_p99", "ttft_mean", "tpot_mean", "vsr",
                "mal", "draft_efficiency", "target_efficiency", "goodput", "slo_attainment",
                "tokens", "requests", "makespan", "steps", "decode_request_steps", "drafted",
                "verified", "accepted", "draft_time", "target_time", "overhead_time", "policy",
                "verify")

CONFIGS = {
    "fixed-burst-linear": (dict(policy="fixed", k=3, requests=40), "linear"),
    "tetris-burst-roofline-kv": (dict(policy="tetris", k=3, extra=1, verify="block",
                                      requests=40, kv_capacity=900, max_num_seqs=16), "roofline"),
    "dsd-poisson-chunked": (dict(policy="dsd", dsd_max_k=None, arrival="poisson", rate=20.0,
                                 requests=40,
                                 enable_chunked_prefill=True, max_num_batched_tokens=64,
                                 max_num_seqs=8), "roofline"),
    "tetris-gamma-replicas-kv-chunked": (dict(policy="tetris", k=2, extra=2, requests=40,
                                              arrival="gamma", rate=30.0, cv=2.0, replicas=2,
                                              router="least_outstanding", kv_capacity=700,
                                              enable_chunked_prefill=True,
                                              max_num_batched_tokens=100), "linear"),
    "fixed-poisson-replicas-prefill-budget": (dict(policy="fixed", k=2, requests=40,
                                                   arrival="poisson", rate=10.0, replicas=2,
                                                   max_num_batched_tokens=90, seed=2), "roofline"),
}

#: The step column and summary keys verification time added (in GOLDEN_VERIFY's digests).
VERIFY_STEP_COLUMNS = STEP_COLUMNS + ("verify_time",)
VERIFY_SUMMARY_KEYS = SUMMARY_KEYS + ("verify_time", "verify_share")

GOLDEN = {
    'dsd-poisson-chunked': {'requests': '6845663a58d82a7c6fb15436', 'steps': '06910a2fcd5877e27db81697', 'summary': 'aa6274c528811459e1e89caf'},  # noqa: E501
    'fixed-burst-linear': {'requests': 'a003b6f16127516c31871a9c', 'steps': '835e629a56493f20f0e41771', 'summary': '9d92359cda0bc5c00e165514'},  # noqa: E501
    'fixed-poisson-replicas-prefill-budget': {'requests': '5fea5085ddc8055393cfd1f3', 'steps': '0b3433de5f1b4b8dc4627454', 'summary': '58e430ecd108abdb7a1fcbb0'},  # noqa: E501
    'tetris-burst-roofline-kv': {'requests': '61fd2cc05fe66eefe23e5509', 'steps': '47d6ea85e76da5192376d137', 'summary': 'bdd9314d8604a5a6871dc754'},  # noqa: E501
    'tetris-gamma-replicas-kv-chunked': {'requests': '2e2c3a02a33d74939b5c5698', 'steps': 'a8a64567ed8beda04eb38e88', 'summary': '65bb0b6f0950d59561e50565'},  # noqa: E501
}

GOLDEN_VERIFY = {
    'dsd-poisson-chunked': {'requests': '594f16f955a626534b9b66c0', 'steps': '435cda3ca44aa279924a3af6', 'summary': '3ecb91eeeb9359ea6c36cc04'},  # noqa: E501
    'fixed-burst-linear': {'requests': '9688a651107200a05c0df020', 'steps': '3555da7ed686952632f8dd1b', 'summary': '22a87322775822361eb83a7f'},  # noqa: E501
    'fixed-poisson-replicas-prefill-budget': {'requests': 'd6061b3f91848074f696c1b8', 'steps': '1933b7534c70c3356a1a5e29', 'summary': '148c135aacb2acd6cd2c895c'},  # noqa: E501
    'tetris-burst-roofline-kv': {'requests': 'd7b956bb5796c955277dbef1', 'steps': 'd42d4894f640435bc1b2c568', 'summary': '8d5ac3b1c5e96a902bba4746'},  # noqa: E501
    'tetris-gamma-replicas-kv-chunked': {'requests': 'f9a217201f30508b174d851b', 'steps': '720b522274390f8c0831a31f', 'summary': 'a2a1ac710e921dfda54ff4b5'},  # noqa: E501
}


def trace():
    return synth_trace(SynthConfig(requests=32, output_mean=48, prompt_mean=32, seed=3))


def digest(result, step_columns=STEP_COLUMNS, summary_keys=SUMMARY_KEYS) -> dict[str, str]:
    """sha256 of each table's columns (name, dtype, bytes; the pre-paged ones by default) and
    of the summary's keys."""
    out = {}
    for name, table, columns in (("requests", result.requests, REQUEST_COLUMNS),
                                 ("steps", result.steps, step_columns)):
        h = hashlib.sha256()
        for col in columns:
            values = np.ascontiguousarray(table[col].to_numpy())
            h.update(f"{col}:{values.dtype}:".encode())
            h.update(values.tobytes())
        out[name] = h.hexdigest()[:24]
    summary = {key: repr(result.summary[key]) for key in summary_keys}
    out["summary"] = hashlib.sha256(json.dumps(summary, sort_keys=True).encode()).hexdigest()[:24]
    return out


def run_named(name: str, synth=None, verify_cost: str = "fused"):
    kw, cost_name = CONFIGS[name]
    cost = (LinearCost() if cost_name == "linear"
            else build_cost_model("roofline", "h100", "vicuna-33b", "vicuna-68m"))
    # client_ttft_s 0: the engine's own stamps, as the digests were taken (the default adds
    # the client's share to first_token and finish: tests/simulator/test_metrics.py)
    config = load_config(None, trace="synth", scheduler="vllm-v0", verify_cost=verify_cost,
                         client_ttft_s=0.0, **kw)
    return simulate(config, synth if synth is not None else trace(), cost_model=cost)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_without_verification_cost_reserve_mode_is_byte_identical_to_the_pre_paged_engine(name):
    assert digest(run_named(name, verify_cost="none")) == GOLDEN[name]


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_reserve_mode_with_the_default_verification_cost_is_pinned(name):
    result = run_named(name)
    assert digest(result, VERIFY_STEP_COLUMNS, VERIFY_SUMMARY_KEYS) == GOLDEN_VERIFY[name]


if __name__ == "__main__":  # pragma: no cover - prints the digests of the current engine
    synth = trace()
    for key in sorted(CONFIGS):
        print(f"    {key!r}: {digest(run_named(key, synth, 'none'))!r},")
    print("GOLDEN_VERIFY")
    for key in sorted(CONFIGS):
        print(f"    {key!r}: "
              f"{digest(run_named(key, synth), VERIFY_STEP_COLUMNS, VERIFY_SUMMARY_KEYS)!r},")
