"""A config written back as TOML (:func:`to_toml`): the config.toml of a result folder, the
identity a result is keyed by (simulator.sim_result.config_identity), a plan's point files.

Apart from the field declarations (simulator.config.sim_config) because it is what a run keeps
of its config: the settings that re-run it as it ran, in declaration order, and no others.
"""

from __future__ import annotations

from dataclasses import fields

from specbatch.simulator.config.checks import NO_K_POLICIES
from specbatch.simulator.config.sim_config import SimConfig
from specbatch.simulator.policies import catalogue


def _applies(name: str, policy: str) -> bool:
    """Whether ``policy`` reads the field ``name`` (to_toml writes only those)."""
    if name == "num_speculative_tokens":  # dsd: a k given would set dsd_max_k on reading
        return policy not in NO_K_POLICIES
    return catalogue.KNOB_POLICY.get(name, policy) == policy


def to_toml(config: SimConfig) -> str:
    """The config as a flat TOML table, fields in declaration order. Omitted: None fields, and
    the settings the run's policy ignores and ``simulate --config`` would refuse as given to
    it (checks.check_settings_apply) or read differently: ``num_speculative_tokens`` for ar
    and dsd (whose window is ``dsd_max_k``), an engine policy's knob for another policy. So a
    written config re-runs as it ran."""
    lines = []
    for f in fields(SimConfig):
        value = getattr(config, f.name)
        if value is None or not _applies(f.name, config.policy):
            continue
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, (int, float)):
            text = repr(value)
        else:
            text = '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'
        lines.append(f"{f.name} = {text}")
    return "\n".join(lines) + "\n"
