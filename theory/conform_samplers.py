"""The public path of :mod:`specbatch.theory.conform.samplers` (docs/api.md): its names,
re-exported."""

from specbatch.theory.conform.samplers import *  # noqa: F403
