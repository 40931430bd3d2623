"""Benchmarks: scripts that measure, print a table and compare side by side in one run."""
