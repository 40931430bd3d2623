"""Selective rollout: vanilla, Dynamic Sampling, GRESO, AERO and the oracle behind one interface (plain NumPy)."""

from greso_jax.selection.aero import AeroSelector
from greso_jax.selection.base import PassConfig, Selector
from greso_jax.selection.driver import (MaxPassesReached, PulledPrompts, RolloutResult, SelectedGroup, StepResult,
                                        run_selection_step)
from greso_jax.selection.dynamic_sampling import DynamicSamplingSelector, VanillaSelector
from greso_jax.selection.factory import make_selector
from greso_jax.selection.greso import GresoSelector
from greso_jax.selection.oracle import (OUTCOME_ALL_CORRECT, OUTCOME_ALL_INCORRECT, OUTCOME_MIXED,
                                        OracleSelector)
from greso_jax.selection.pass_sizing import next_pass_size

__all__ = [
    "AeroSelector", "DynamicSamplingSelector", "GresoSelector", "MaxPassesReached", "OUTCOME_ALL_CORRECT",
    "OUTCOME_ALL_INCORRECT", "OUTCOME_MIXED", "OracleSelector", "PassConfig", "PulledPrompts", "RolloutResult",
    "SelectedGroup", "Selector", "StepResult", "VanillaSelector", "make_selector", "next_pass_size",
    "run_selection_step",
]
