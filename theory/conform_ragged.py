"""The public path of :mod:`specbatch.theory.conform.ragged` (docs/api.md): its names,
re-exported."""

from specbatch.theory.conform.ragged import *  # noqa: F403
