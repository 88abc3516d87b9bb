"""Sweeps, comparisons, plots, reports and the ``specbatch`` CLI root."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("specbatch")
except PackageNotFoundError:  # running from a source tree without install
    __version__ = "0.0.0+unknown"
