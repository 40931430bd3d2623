"""Experiment configs: the base config, its validation, the warm-start field checks and the paper setups."""

from greso_jax.config.base import DTYPES, get_config, rl_seed
from greso_jax.config.validation import FIELD_SPECS, selection_field_docs, validate
from greso_jax.core.specs import ConfigError

__all__ = ["ConfigError", "DTYPES", "FIELD_SPECS", "get_config", "rl_seed", "selection_field_docs", "validate"]
