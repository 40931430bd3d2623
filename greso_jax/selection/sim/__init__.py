"""The selection simulator: every strategy on a synthetic population with drifting success rates, and the two
simulation-only references, the oracle (knows the draws) and known_rate (knows the rates).

Importing it registers the oracle and known_rate (after the training strategies).
"""

from greso_jax.selection.sim import oracle, known_rate  # noqa: F401  (registers)
from greso_jax.selection.sim.known_rate import KnownRateSelector
from greso_jax.selection.sim.oracle import OracleSelector
from greso_jax.selection.sim.population import (CLASS_FRACTIONS, BernoulliRollouts, LatentPopulation, PromptStream,
                                                calibrated_fractions)
from greso_jax.selection.sim.runner import (SimSettings, all_runs, calibration_bins, efficiency, run_strategy,
                                            sizing_grid, sizing_table)

__all__ = ["BernoulliRollouts", "CLASS_FRACTIONS", "KnownRateSelector", "LatentPopulation", "OracleSelector",
           "PromptStream", "SimSettings", "all_runs", "calibrated_fractions", "calibration_bins",
           "efficiency", "run_strategy", "sizing_grid", "sizing_table"]
