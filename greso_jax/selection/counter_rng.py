"""Counter-based uniform draws: the same (seed, keys...) gives the same number on every host and after a resume.

`Stream` is the one table of stream ids (the word after the seed in a draw's key), so that two
uses of these draws, or of the seeded NumPy generators beside them, never draw alike.
"""

from __future__ import annotations

import numpy as np


class Stream:
    """Stream id of every seeded draw in selection. Two uses may share an id only when they never run
    in one selector (MoPPS and the posterior both use 3); the values are fixed, since changing one
    changes every decision drawn from it."""

    GRESO_KEEP = 1  # GRESO's keep decisions
    AERO_REJECT = 2  # AERO's rejection and posterior-subset draws
    MOPPS_THOMPSON = 3  # MoPPS's Thompson draws
    POSTERIOR_KEEP = 3  # the posterior selector's keep decisions (never in one run with MoPPS)
    MOPPS_REFERENCE = 4  # seeds the NumPy sample of prompts MoPPS estimates its tolerance from
    SIM_POPULATION = 7  # seeds the simulator's latent population (NumPy)
    SIM_SHUFFLE = 11  # seeds the simulator's per-epoch prompt order (NumPy)
    SIM_LEVELS = 13  # seeds the noise of the simulator's observable prompt levels (NumPy)
    SIM_ROLLOUTS = 101  # the simulator's Bernoulli responses

    # Pairs allowed to share an id: they are never drawn by one selector.
    SHARED = (("MOPPS_THOMPSON", "POSTERIOR_KEEP"),)

_MASK64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15  # odd constant that decorrelates consecutive key words


def _mix_scalar(x: int) -> int:
    """splitmix64 finaliser on a Python int (no numpy overflow warnings for scalars)."""
    x &= _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def _mix_array(x: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser on a uint64 array; uint64 array arithmetic wraps modulo 2^64 by design."""
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def scalar_key(*words: int) -> int:
    """Folds integer words (seed, stream, step, ...) into one 64-bit key."""
    key = _GOLDEN
    for word in words:
        key = _mix_scalar(key ^ ((int(word) + _GOLDEN) & _MASK64))
    return key


def uniform(key: int, *index_arrays) -> np.ndarray:
    """Uniform floats in [0, 1), one per element of the broadcast index arrays (e.g. prompt ids [N]).

    Each output depends only on `key` (see `scalar_key`) and its own indices, never on the
    array's length or order, so a prompt's draw is the same whichever batch it arrives in.
    """
    if not index_arrays:
        raise ValueError("uniform: needs at least one index array")
    arrays = np.broadcast_arrays(*[np.asarray(a, dtype=np.int64) for a in index_arrays])
    golden = np.uint64(_GOLDEN)
    state = _mix_array((arrays[0].astype(np.uint64) + golden) ^ np.uint64(key))
    for index in arrays[1:]:
        state = _mix_array(state ^ (index.astype(np.uint64) + golden))
    return (state >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))
