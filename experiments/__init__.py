"""Experiment configs (one get_config(arg) file each) and, under bench/, the benchmarks that run them."""
