"""Builds the configured selector from `config.selection` (greso_jax/configs.py)."""

from __future__ import annotations

import ml_collections

from greso_jax.selection.aero import AeroSelector
from greso_jax.selection.base import PassConfig, Selector
from greso_jax.selection.dynamic_sampling import DynamicSamplingSelector, VanillaSelector
from greso_jax.selection.greso import GresoSelector
from greso_jax.selection.oracle import OracleSelector, OutcomeFn


def make_selector(selection_config: ml_collections.ConfigDict, *, num_prompts: int, group_size: int,
                  train_batch_size: int, seed: int, outcome: OutcomeFn | None = None) -> Selector:
    """The selector named by selection_config.strategy.

    group_size: responses per prompt (rl.group_size; AERO sizes its groups itself).
    train_batch_size: groups per step, kept on the selector as `train_batch_size`.
    outcome: the oracle's foresight (simulation only), see selection.oracle.OutcomeFn.
    """
    c = selection_config
    if train_batch_size < 1:
        raise ValueError(f"train.train_batch_size: must be >= 1, got {train_batch_size}")
    passes = PassConfig(rollout_batch_size=c.rollout_batch_size, min_pass_size=c.min_pass_size,
                        max_passes=c.max_passes, on_max_passes=c.on_max_passes)
    common = dict(group_size=group_size, pass_config=passes, seed=seed)
    if c.strategy != "oracle" and outcome is not None:
        raise ValueError(f"selection.strategy: `outcome` is only for 'oracle', got strategy {c.strategy!r}")
    if c.strategy == "vanilla":
        selector = VanillaSelector(num_prompts, **common)
    elif c.strategy == "dynamic_sampling":
        selector = DynamicSamplingSelector(num_prompts, **common)
    elif c.strategy == "greso":
        selector = GresoSelector(num_prompts, p_easy=c.p_easy, p_hard=c.p_hard, delta_p=c.delta_p,
                                 target_zero_variance=c.target_zero_variance, p_min=c.p_min, p_max=c.p_max,
                                 **common)
    elif c.strategy == "aero":
        selector = AeroSelector(num_prompts, n_explore=c.aero_n_explore, n_extra=c.aero_n_extra,
                                max_group_size=c.aero_max_group_size, reject_k=c.aero_reject_k,
                                reject_below=c.aero_reject_below, prior_alpha=c.aero_prior_alpha,
                                prior_beta=c.aero_prior_beta, seed=seed)
    elif c.strategy == "oracle":
        if outcome is None:
            raise ValueError("selection.strategy: 'oracle' needs the simulator's `outcome` callable "
                             "(it exists only in simulation)")
        selector = OracleSelector(num_prompts, outcome=outcome, **common)
    else:
        raise ValueError(f"selection.strategy: unknown strategy {c.strategy!r}")
    selector.train_batch_size = int(train_batch_size)
    return selector
