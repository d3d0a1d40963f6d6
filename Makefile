# The README's two commands. Keep them in sync with README.md "Quick start".
PY ?= python3

.PHONY: demo test install

install:
	$(PY) -m pip install -e '.[test]'

demo: install
	$(PY) jobs/sweep.py

test: install
	$(PY) -m pytest -q -p no:cacheprovider tests
