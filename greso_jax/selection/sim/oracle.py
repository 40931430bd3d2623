"""Oracle selector (simulation only): knows each prompt's next outcome and skips exactly the zero-variance ones."""

from __future__ import annotations

from typing import Callable

import numpy as np

from greso_jax.selection.base import OUTCOME_MIXED, check_prompt_ids
from greso_jax.selection.registry import register_strategy
from greso_jax.selection.strategies.dynamic_sampling import FilteringSelector


# outcome(step, prompt_ids int64 [N]) -> int [N] of the OUTCOME_* codes the next rollout of each prompt will have.
OutcomeFn = Callable[[int, np.ndarray], np.ndarray]


@register_strategy("oracle", bound=True)
class OracleSelector(FilteringSelector):
    """Skips, at zero cost, every prompt whose next group would be all correct or all incorrect.

    The physical limit of any pre-rollout selector. `outcome` must predict exactly what the
    rollout will produce (a simulator with counter-based draws can); the step still drops
    any zero-variance group that slips through, so a wrong prediction costs only responses. It
    predicts nothing from history (`predicted_zero_variance` is None): it knows.
    """

    simulation_only = True
    extras = ("outcome",)
    # Every kept prompt will have variance, so nothing needs over-provisioning: pull exactly what is missing.
    default_pass_sizing = "exact"

    def __init__(self, num_prompts: int, *, outcome: OutcomeFn | None = None, **common):
        super().__init__(num_prompts, **common)
        if not callable(outcome):
            raise ValueError("selection.strategy: 'oracle' needs the simulator's `outcome` callable "
                             "(step, prompt_ids) -> outcome codes; it exists only in simulation")
        self.outcome = outcome

    def _predict(self, ids: np.ndarray) -> np.ndarray:
        codes = np.asarray(self.outcome(self.step, ids))
        if codes.shape != ids.shape:
            raise ValueError(f"oracle: outcome returned shape {codes.shape} for prompt_ids {ids.shape}")
        return codes

    def should_keep(self, prompt_ids, epochs=None) -> np.ndarray:
        ids = check_prompt_ids(prompt_ids, self.num_prompts, "oracle.should_keep")
        return self._predict(ids) == OUTCOME_MIXED

    def _skip_kinds(self, ids: np.ndarray) -> np.ndarray:
        return self._predict(ids)
