"""Selective rollout strategies behind one interface (plain NumPy): vanilla, DS, GRESO, AERO, MoPPS, posterior
(`strategies/`); the simulator with its two references, oracle and known_rate (`sim/`); the predictor replay.

Importing this package registers every built-in strategy in `STRATEGIES`, in this order.
"""

from greso_jax.selection import strategies, sim  # noqa: F401  (registers: the training strategies, then the sim's)
from greso_jax.selection.base import (OUTCOME_ALL_CORRECT, OUTCOME_ALL_INCORRECT, OUTCOME_MIXED, OUTCOME_NONE,
                                      MaxPassesReached, Selector)
from greso_jax.selection.beta import zero_variance_chance
from greso_jax.selection.counter_rng import Stream
from greso_jax.selection.driver import StepResult, run_selection_step
from greso_jax.selection.groups import Group, PassRequest, PulledPrompts, ScoredPass
from greso_jax.selection.pass_sizing import next_pass_size
from greso_jax.selection.registry import (ALIASES, STRATEGIES, VARIANTS, Variant, baseline, bound, causal_bound,
                                          default_settings,
                                          make_selector, named_variants, register_strategy, register_variant,
                                          resolve_strategy, settings_of, training_strategies,
                                          training_strategy_names, variant)
from greso_jax.selection.stream import Aborted, Carry, LaneResult, StreamBackend, run_stream_step
from greso_jax.selection.settings import Ablation, PassConfig, StrategySettings
from greso_jax.selection.sim import KnownRateSelector, OracleSelector
from greso_jax.selection.strategies.aero import AeroSelector, AeroSettings
from greso_jax.selection.strategies.dynamic_sampling import (DynamicSamplingSelector, DynamicSamplingSettings,
                                                             FilteringSelector)
from greso_jax.selection.strategies.greso import GresoSelector, GresoSettings
from greso_jax.selection.strategies.mopps import MoppsSelector, MoppsSettings
from greso_jax.selection.strategies.posterior import PosteriorSelector, PosteriorSettings
from greso_jax.selection.strategies.vanilla import VanillaSelector

__all__ = [
    "ALIASES", "Ablation", "Aborted", "Carry", "LaneResult", "StreamBackend", "run_stream_step", "AeroSelector", "AeroSettings", "DynamicSamplingSelector", "DynamicSamplingSettings",
    "FilteringSelector", "Group", "GresoSelector", "GresoSettings", "KnownRateSelector", "MaxPassesReached",
    "MoppsSelector", "MoppsSettings", "OUTCOME_ALL_CORRECT", "OUTCOME_ALL_INCORRECT", "OUTCOME_MIXED",
    "OUTCOME_NONE", "OracleSelector", "PassConfig", "PassRequest", "PosteriorSelector", "PosteriorSettings",
    "PulledPrompts", "STRATEGIES", "ScoredPass", "Selector", "StepResult", "Stream", "StrategySettings", "VARIANTS",
    "Variant", "VanillaSelector", "baseline", "bound", "causal_bound", "default_settings", "make_selector",
    "named_variants",
    "next_pass_size", "register_strategy", "register_variant", "resolve_strategy", "run_selection_step",
    "settings_of", "training_strategies", "training_strategy_names", "variant", "zero_variance_chance",
]
