"""A training run: the loop, its run directory and checkpoints, its records, and the wiring from config to components."""
