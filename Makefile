# Dynamic-batching TTS on TorchServe. `make demo` and `make test` set everything up.
PY := .venv/bin/python
export PATH := $(CURDIR)/.venv/bin:$(PATH)

.PHONY: setup archive demo serve stop test bench bench-planner clean

.venv/.setup-done: requirements.txt scripts/setup.sh
	bash scripts/setup.sh

setup: .venv/.setup-done

archive: setup
	$(PY) -m scripts.build_archive

demo: setup
	$(PY) -m scripts.demo

# A long-running server on 127.0.0.1:8080-8082 with `tts` registered (batchSize 8, maxBatchDelay 50 ms).
# Starts first, so a second `make serve` stops before rebuilding the archive in use.
serve: setup
	$(PY) -m scripts.torchserve_ctl start
	$(PY) -m scripts.build_archive
	$(PY) -m scripts.torchserve_ctl register tts.mar --model-name tts --batch-size 8 --max-batch-delay-ms 50

stop: setup
	$(PY) -m scripts.torchserve_ctl stop

test: setup
	$(PY) -m pytest -q

# TorchServe batched vs unbatched vs the design note's Flask server vs the in-process ceiling
# (about 15 minutes here); writes benchmarks/results/latest.json, a table and a plot.
bench: setup
	$(PY) -m scripts.bench

# Issue 3's in-process planner benchmark: one padded call vs singles vs the planner.
bench-planner: setup
	$(PY) -m scripts.bench_planner

clean:
	rm -rf build out model_store/*.mar .pytest_cache .hypothesis
