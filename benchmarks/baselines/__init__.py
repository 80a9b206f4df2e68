"""Baselines used only for comparison in ``scripts/bench.py``."""
