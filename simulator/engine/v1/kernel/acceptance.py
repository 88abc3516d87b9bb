"""The acceptance replay's uniforms in the compiled loop: η_j of a request at an output
position, SplitMix64 on its stream key, bit for bit simulator.replay.chain.uniforms (the
chain rule's thresholds are compared with them in :mod:`~simulator.engine.v1.kernel.loop`).
"""

from __future__ import annotations

import numpy as np
from numba import njit

_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_POSMUL = np.uint64(0xD1B54A32D192ED03)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_S30, _S27, _S31, _S11 = np.uint64(30), np.uint64(27), np.uint64(31), np.uint64(11)
_UNIT = 1.0 / 9007199254740992.0  # 2**-53


@njit(cache=True)
def eta(key, pos, j):
    """η_j of the request with stream ``key`` at output position ``pos`` (uniforms)."""
    seed = key ^ (np.uint64(pos) * _POSMUL)
    x = seed + np.uint64(j + 1) * _GOLDEN
    x ^= x >> _S30
    x *= _M1
    x ^= x >> _S27
    x *= _M2
    x ^= x >> _S31
    x >>= _S11
    return np.float64(x) * _UNIT

