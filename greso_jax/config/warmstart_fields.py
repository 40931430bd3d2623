"""Cross-field checks of the warm start's config fields (train.warmstart_*): its accuracy band, levels and pool."""

from __future__ import annotations

import ml_collections

from greso_jax.data import arith
from greso_jax.core.specs import ConfigError


def validate_warmstart_fields(train: ml_collections.ConfigDict, data: ml_collections.ConfigDict) -> None:
    """Raises ConfigError naming the field when the band, a level choice or its own pool cannot work."""
    _validate_warmstart_band(train, data)
    _validate_warmstart_levels(train, data)
    _validate_warmstart_pool(train, data)


def _validate_warmstart_pool(train: ml_collections.ConfigDict, data: ml_collections.ConfigDict) -> None:
    """A pool of the warm start's own needs an arithmetic warm start and room in the levels beside RL's pools."""
    if not train.warmstart_num_problems:
        return
    if data.source != "arith" or not train.warmstart_steps:
        raise ConfigError(f"train.warmstart_num_problems: {train.warmstart_num_problems} problems of the warm start's "
                          "own need an arithmetic warm start (data.source 'arith', train.warmstart_steps > 0)")
    capacity = arith.pool_capacity(arith.level_weights(data.arith_level_weights))
    room = capacity - data.arith_num_train - data.arith_num_heldout
    if train.warmstart_num_problems > room:
        raise ConfigError(f"train.warmstart_num_problems: {train.warmstart_num_problems} is more than the "
                          f"{room} problems data.arith_level_weights' levels hold beside the training and "
                          "held-out pools")


def _validate_warmstart_band(train: ml_collections.ConfigDict, data: ml_collections.ConfigDict) -> None:
    """A band needs low <= high, a maximum of steps holding a check, and training rows beside its validation rows."""
    if not train.warmstart_accuracy_low:
        if train.warmstart_accuracy_high != 1.0 or train.warmstart_band_levels:
            name = "band_levels" if train.warmstart_band_levels else "accuracy_high"
            raise ConfigError(f"train.warmstart_{name}: the band is off; set train.warmstart_accuracy_low > 0 to stop "
                              "the warm start on it")
        return
    if train.warmstart_accuracy_high < train.warmstart_accuracy_low:
        raise ConfigError(f"train.warmstart_accuracy_high: must be >= train.warmstart_accuracy_low "
                          f"({train.warmstart_accuracy_low}), got {train.warmstart_accuracy_high}")
    if not train.warmstart_steps:
        raise ConfigError("train.warmstart_steps: must be > 0 with train.warmstart_accuracy_low set (it is the "
                          "band's maximum)")
    if train.warmstart_check_every > train.warmstart_steps:
        raise ConfigError(f"train.warmstart_check_every: {train.warmstart_check_every} is more than "
                          f"train.warmstart_steps ({train.warmstart_steps}, the band's maximum): no check would run")
    supervised, name = ((train.warmstart_num_problems, "train.warmstart_num_problems") if train.warmstart_num_problems
                        else (data.arith_num_train, "data.arith_num_train"))
    if data.source == "arith" and train.warmstart_validation_rows >= supervised:
        raise ConfigError(f"train.warmstart_validation_rows: {train.warmstart_validation_rows} must be fewer than "
                          f"{name} ({supervised}): the rest are the supervised data")


def _validate_warmstart_levels(train: ml_collections.ConfigDict, data: ml_collections.ConfigDict) -> None:
    """Level choices are arithmetic only and must leave rows to teach or check (taught, and in the pool)."""
    in_pool = [v for v, weight in arith.level_weights(data.arith_level_weights).items() if weight > 0]
    taught = {v for v in (train.warmstart_levels or arith.LEVELS) if v in in_pool}
    drawn = {v for v, w in enumerate(train.warmstart_level_weights) if w > 0}
    band = set(train.warmstart_band_levels)
    for name, levels, fine in (("levels", train.warmstart_levels, taught), ("band_levels", band, band <= taught),
                               ("level_weights", drawn, drawn <= taught)):
        if levels and (data.source != "arith" or not fine):
            raise ConfigError(f"train.warmstart_{name}: {tuple(sorted(levels))} must name arithmetic levels the warm "
                              "start teaches (train.warmstart_levels) and the pool holds (data.arith_level_weights)")
