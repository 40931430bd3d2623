"""Known-rate selector (simulation only): the posterior selector's rule on each prompt's true success rate.

It knows p_i(t), the chance that prompt i's response is correct at the current step, but not the
draws, so it is the limit of every selector that predicts from history: no estimate of p can
beat knowing it. Its gap to the oracle (which knows the draws) is what the luck of G Bernoulli
draws costs; the posterior selector's gap to it is what estimating p from past rollouts costs.
Everything else is the posterior's: the keep rule on the chance of a zero-variance group,
p^G + (1-p)^G, the threshold tuned toward the same target, passes sized from the prediction.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np

from greso_jax.core.specs import FLOAT, Spec, field
from greso_jax.selection.base import check_prompt_ids
from greso_jax.selection.registry import register_strategy
from greso_jax.selection.strategies.posterior import PosteriorSelector, PosteriorSettings

# success(step, prompt_ids int64 [N]) -> float [N]: each prompt's true success probability at `step`.
SuccessFn = Callable[[int, np.ndarray], np.ndarray]


@dataclasses.dataclass(frozen=True)
class KnownRateSettings(PosteriorSettings):
    """`selection.known_rate.*` (simulator only): the posterior's knobs; no exploration by default,
    since a known rate never goes stale."""

    explore: float = field(0.0, Spec(FLOAT, 0, 1), "keep probability of a prompt predicted zero-variance")


@register_strategy("known_rate", causal_bound=True)
class KnownRateSelector(PosteriorSelector):
    """The posterior selector with the exact chance of a zero-variance group in place of its estimate
    (its prediction is the true chance)."""

    simulation_only = True
    Settings = KnownRateSettings
    extras = ("success",)  # no levels: a known rate needs no prior

    def __init__(self, num_prompts: int, *, success: SuccessFn | None = None, **common):
        super().__init__(num_prompts, **common)
        if not callable(success):
            raise ValueError("selection.strategy: 'known_rate' needs the simulator's `success` callable "
                             "(step, prompt_ids) -> success probabilities; it exists only in simulation")
        self.success = success

    def zero_variance_chances(self, prompt_ids) -> np.ndarray:
        ids = check_prompt_ids(prompt_ids, self.num_prompts, "known_rate.zero_variance_chances")
        p = np.asarray(self.success(self.step, ids), np.float64)
        if p.shape != ids.shape:
            raise ValueError(f"known_rate: success returned shape {p.shape} for prompt_ids {ids.shape}")
        return p ** self.group_size + (1 - p) ** self.group_size

    def has_evidence(self, ids: np.ndarray) -> np.ndarray:
        return np.ones(ids.shape, bool)  # every prompt's rate is known from the start
