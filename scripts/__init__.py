"""Operator scripts: build archives, run TorchServe, register, synthesise, demo, benchmarks."""
