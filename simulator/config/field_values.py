"""The values SimConfig's fields choose from: each choice field's names (several read off their
catalogues: schedulers, policies), the override spellings, and the model and draft names.

Apart from the field declarations (simulator.config.sim_config) so that tests and the modules
that own a catalogue can compare their names with the field's without the whole config, and
so the declarations read as the list of knobs.
"""

from __future__ import annotations

from specbatch.simulator.config import schedulers
from specbatch.simulator.defaults import FREE_DRAFTS, HEAD_DRAFTS
from specbatch.simulator.policies import catalogue

ARRIVALS = ("burst", "poisson", "gamma", "trace")
ROUTERS = ("round_robin", "least_outstanding", "vllm_dp_lb")
#: The ``cost`` field's names (simulator.cost.registry.COST_NAMES; "auto": simulator.cost.resolve).
COSTS = ("auto", "roofline", "profiled", "calibrated", "aic")
#: The ``engine`` field's values (simulator.engine.v1.compiled).
ENGINES = ("auto", "compiled", "numpy")
SAMPLINGS = ("auto", "in_order", "resample")
THRESHOLD_MODES = ("cumulative", "per_token")
KV_MODES = ("reserve", "paged")
#: Step composers (simulator.config.schedulers, one row each): vLLM V1's unified token budget
#: (simulator.engine.v1.compose), or V0's prefill-first steps (the papers' setting).
SCHEDULERS = schedulers.names()
#: ``predictor``: TETRIS's estimate of P(τ ≥ j) (simulator.replay.accept_predictor.PREDICTORS).
PREDICTORS = ("confidence", "learned", "logistic")
#: ``acceptance``: replay the trace's acceptance, or a model fitted from it
#: (simulator.replay.fitted_acceptance.ACCEPTANCE_MODELS).
ACCEPTANCE_MODELS = ("trace", "constant", "per-position")
#: The built-in policies (simulator.policies.catalogue, which simulator.policies.registry.POLICIES
#: loads), named from the catalogue so a ``--help`` lists them without importing the engine.
POLICY_NAMES = catalogue.names()
#: Override/TOML spellings that map onto a field name.
ALIASES = {"k": "num_speculative_tokens", "e": "extra", "n": "requests"}
#: A TOML or config value: what a field may hold.
Value = str | int | float | bool | None


def model_names() -> tuple[str, ...]:
    """The ``target`` field's names: every registry shape (traces.models.shapes)."""
    from specbatch.traces.models.shapes import SHAPES

    return tuple(sorted(SHAPES))


def draft_names() -> tuple[str, ...]:
    """The ``draft`` field's names: the shapes, the host-side drafters and the heads."""
    return model_names() + FREE_DRAFTS + HEAD_DRAFTS
