"""The config fields of the engines' policies (simulator.policies.engines, .stops), the calibration
split (simulator.policies.calibration) and CUDA-graph padding
(simulator.cost.features.graph_padding), declared here and placed in
:class:`simulator.config.sim_config.SimConfig`; and their cross-field checks
(:func:`simulator.config.checks.check_policy_knobs`, called by ``validate_config``). Names follow
the engines' knobs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from specbatch.fields import Range, fail, knob
from specbatch.simulator.policies.catalogue import KNOB_POLICY, names

if TYPE_CHECKING:
    from specbatch.simulator.config.sim_config import SimConfig

#: Policies that read the calibration split (they fail without one; simulator.policies.catalogue).
CALIBRATING = names(calibrates=True)
#: The engine policies' names (simulator.policies.catalogue; simulator.policies.registry.POLICIES
#: holds their classes).
ENGINE_POLICY_NAMES = names(engine=True)
#: Each engine-policy knob and the policy that reads it:
#: :data:`simulator.policies.catalogue.KNOB_POLICY`.

#: The split a run that calibrates uses when ``calibration_split`` is left at 0 (policies
#: vllm-dynamic and specdec++, predictors learned and logistic): a quarter of the trace's
#: requests, as analysis/specs/engines.toml sets.
DEFAULT_CALIBRATION_SPLIT = 0.25
CALIBRATION_SPLIT = knob(
    0.0, "fraction of the trace's requests held out of replay (by request, seeded) for the "
    "policies that calibrate offline (vllm-dynamic, specdec++) and the fitted predictors "
    f"(learned, logistic); 0: no split, except for those, which hold out "
    f"{DEFAULT_CALIBRATION_SPLIT} (said in the output: held_out_requests)",
    range=Range(0, 1, high_open=True, what="a fraction"))
VLLM_TABLE = knob(
    None, "vLLM's batch-size table of batch-schedule: inclusive ranges 'lo-hi:K,...' (or "
    "[[lo, hi, K], ...]) from 1; gaps inherit the previous K", none="off")
TRT_SCHEDULE = knob(
    None, "TensorRT-LLM's draft_len_schedule of batch-schedule: 'batch_size:draft_len,...', "
    "each key the largest batch size of its length; 0 past the last", none="off")
SGLANG_CONFIG = knob(
    None, "SGLang's speculative-adaptive-config of ema-adaptive: a JSON object of batch-size "
    'slots, e.g. {"1": {"candidate_steps": [1, 3, 5]}}', none="SGLang's default")
SPECDEC_THRESHOLD = knob(
    0.5, "specdec++'s h: stop drafting once P(at least one rejection) > h",
    range=Range(0, 1, low_open=True, high_open=True, what="a probability"))
ENTROPY_THRESHOLD = knob(
    2.45, "entropy-stop's θ in nats: stop before a token whose draft entropy exceeds θ "
    "(AdaEDL's bound 1 - sqrt(γH) < λ is H > (1 - λ)²/γ)",
    range=Range(0, float("inf"), low_open=True, what="nats"))
ADAPTIVE_CONFIDENCES = knob(
    "stale", "vllm-adaptive's confidences for sizing B: stale (the previous step's, as vLLM "
    "sizes B on the CPU) or fresh (the current step's)", choices=("stale", "fresh"))
ADAPTIVE_COST_TABLES = knob(
    "profiled", "vllm-adaptive's step costs: profiled (vLLM's start-up tables: median of 5 "
    "dummy steps, forced monotone, stepped at the graph sizes, at one context) or exact (the "
    "simulator's own step time for every B)", choices=("profiled", "exact"))
ADAPTIVE_SURVIVAL = knob(
    "estimate", "vllm-adaptive's survival S_ij: estimate (the predictor field's: raw "
    "confidence or a fitted model) or truth (the path's exact TV P_ij: a bound)",
    choices=("estimate", "truth"))
ADAPTIVE_PROFILE_CONTEXT_LEN = knob(
    8192, "vllm-adaptive's profile KV context in tokens "
    "(VLLM_ADAPTIVE_VERIFICATION_PROFILE_CONTEXT_LEN)", range=Range(0, float("inf"),
                                                                    what="tokens"))
CUDA_GRAPH_SIZES = knob(
    None, "captured CUDA-graph sizes in tokens per pass, or one N for [1, 2, 4] + "
    "range(8, N + 1, 8) (vLLM): smaller passes are priced padded to the next size",
    none="no padding")


def calibrates(c: SimConfig) -> bool:
    """Whether a run of config ``c`` calibrates on held-out requests: a policy of
    :data:`CALIBRATING`, or a fitted predictor."""
    return c.policy in CALIBRATING or c.predictor != "confidence"


def applied_split(c: SimConfig) -> float:
    """The calibration split a run of ``c`` holds out: ``calibration_split``, or
    :data:`DEFAULT_CALIBRATION_SPLIT` where it is 0 and the run calibrates (a newcomer's
    ``--policy vllm-dynamic`` or ``--predictor learned`` runs without choosing a split)."""
    if c.calibration_split or not calibrates(c):
        return c.calibration_split
    return DEFAULT_CALIBRATION_SPLIT


def check_knobs_apply(c: SimConfig, given: Any, where: str) -> None:
    """Refuse, for one run, an engine policy's knob the user gave to another policy (it would
    be silently ignored)."""
    for name, policy in KNOB_POLICY.items():
        if name in given and c.policy != policy:
            fail(where, name, f"no {name} for policy {c.policy} (only {policy} reads it)",
                 getattr(c, name))
