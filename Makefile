# Two commands for a fresh machine: `make demo` and `make test`. Each creates .venv and
# installs the pinned dependencies (requirements.lock) on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.tether-installed
OUT ?= runs/demo

.PHONY: demo test install clean

$(STAMP): pyproject.toml requirements.lock
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	# torch first and pinned: an unpinned torch pulls a multi-GB CUDA build.
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -r requirements.lock
	$(BIN)/python -m pip install --quiet --no-deps -e .
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/tether demo --out $(OUT)

test: $(STAMP)
	$(BIN)/python -m pytest -q -p no:cacheprovider

clean:
	rm -rf $(VENV) runs .pytest_cache
