"""What one simulation is asked to do: the :class:`SimConfig` fields and their checks.

Reading order: ``field_values`` (the values the fields choose from), ``toml_reader`` (a config
file's TOML table), ``sim_config`` (the frozen dataclass, its fields, TOML loading), ``checks``
(static checks, one run's settings, checks against the trace), ``tree_checks`` (what a tree run
adds), ``toml_writer`` (a config written back as TOML).
A policy's own knobs are declared with the policy (simulator.policies.knobs) and read here.
"""
