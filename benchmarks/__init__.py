"""Benchmarks: comparison baselines (not part of the served system) and results."""
