"""specbatch: batch speculative decoding, captured, simulated, optimised and proved.

Packages, in dependency order (each imports only those to its right):
``cli -> analysis -> {live, simulator} -> traces -> theory -> errors``.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("specbatch")
except PackageNotFoundError:  # running from a source tree without install
    __version__ = "0.0.0+unknown"
