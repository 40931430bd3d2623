"""Selective rollout strategies behind one interface (plain NumPy): vanilla, DS, GRESO, AERO, MoPPS, posterior;
and the simulator's two bounds, oracle and known_rate.

Importing this package registers every built-in strategy in `STRATEGIES`, in this order.
"""

from greso_jax.selection import (vanilla, dynamic_sampling, greso, aero, mopps, posterior,  # noqa: F401  (registers)
                                 oracle, known_rate)
from greso_jax.selection.aero import AeroSelector, AeroSettings
from greso_jax.selection.base import (OUTCOME_ALL_CORRECT, OUTCOME_ALL_INCORRECT, OUTCOME_MIXED, OUTCOME_NONE,
                                      MaxPassesReached, PassConfig, Selector, StrategySettings)
from greso_jax.selection.driver import StepResult, run_selection_step
from greso_jax.selection.dynamic_sampling import DynamicSamplingSelector
from greso_jax.selection.greso import GresoSelector, GresoSettings
from greso_jax.selection.groups import Group, PassRequest, PulledPrompts, ScoredPass
from greso_jax.selection.mopps import MoppsSelector, MoppsSettings
from greso_jax.selection.oracle import OracleSelector
from greso_jax.selection.pass_sizing import next_pass_size
from greso_jax.selection.posterior import PosteriorSelector, PosteriorSettings
from greso_jax.selection.registry import (ALIASES, STRATEGIES, default_settings, make_selector, register_strategy,
                                          resolve_strategy, settings_of, training_strategies,
                                          training_strategy_names)
from greso_jax.selection.vanilla import VanillaSelector

__all__ = [
    "ALIASES", "AeroSelector", "AeroSettings", "DynamicSamplingSelector", "Group", "GresoSelector", "GresoSettings",
    "MaxPassesReached", "MoppsSelector", "MoppsSettings", "OUTCOME_ALL_CORRECT", "OUTCOME_ALL_INCORRECT",
    "OUTCOME_MIXED", "OUTCOME_NONE", "OracleSelector", "PassConfig", "PassRequest", "PosteriorSelector",
    "PosteriorSettings", "PulledPrompts", "STRATEGIES", "ScoredPass", "Selector", "StepResult",
    "StrategySettings", "VanillaSelector", "default_settings", "make_selector", "next_pass_size",
    "register_strategy", "resolve_strategy", "run_selection_step", "settings_of", "training_strategies",
    "training_strategy_names",
]
