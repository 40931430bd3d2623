"""Beta-binomial arithmetic the Beta-posterior strategies share (the posterior selector, MoPPS)."""

from __future__ import annotations

import numpy as np


def zero_variance_chance(alpha: np.ndarray, beta: np.ndarray, group_size: int) -> np.ndarray:
    """E[p^G + (1-p)^G] for p ~ Beta(alpha, beta): the chance that G responses are all correct or all
    incorrect, a product of G ratios for a Beta (no sampling). alpha, beta float [N] (> 0); returns
    float64 [N]."""
    return np.sum(zero_variance_sides(alpha, beta, group_size), axis=0)


def zero_variance_sides(alpha: np.ndarray, beta: np.ndarray, group_size: int) -> np.ndarray:
    """(E[p^G], E[(1-p)^G]) for p ~ Beta(alpha, beta): the chances of all correct and of all incorrect,
    float64 [2, N]."""
    a, b = np.asarray(alpha, np.float64)[:, None], np.asarray(beta, np.float64)[:, None]
    i = np.arange(group_size, dtype=np.float64)[None, :]
    return np.stack([np.prod((a + i) / (a + b + i), axis=1), np.prod((b + i) / (a + b + i), axis=1)])
