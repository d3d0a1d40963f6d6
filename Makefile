# The README's two commands (Quick start). Keep in sync with README.md and .ci/run.
PY ?= python

.PHONY: demo test bench

demo:
	$(PY) -m pip install -e . && $(PY) jobs/sweep.py

test:
	$(PY) -m pip install -e '.[test]' && $(PY) -m pytest -q -n auto tests

bench:
	$(PY) bench/bench_sandbox.py && $(PY) bench/bench_plan.py && $(PY) bench/bench_sweep.py
