# hotpath: the two commands a newcomer needs are `make serve` and `make test`.
VENV      ?= .venv
PY        := $(VENV)/bin/python
HOTPATH   := $(VENV)/bin/hotpath
export HF_HUB_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: setup engines serve test test-unit clean help

help:
	@echo "make serve   set up, build the model repository, start Triton, show a real request"
	@echo "make test    set up, then run the unit and integration tests (real tritonserver)"
	@echo "make engines export models and write config.pbtxt files (incremental)"

setup:
	@bash scripts/setup.sh

engines: setup
	@$(HOTPATH) engines

serve: engines
	@$(HOTPATH) serve --demo

test: setup
	@$(PY) -m pytest -q

test-unit: setup
	@$(PY) -m pytest -q tests/unit

clean:
	rm -rf .hotpath model_repository/*/[0-9]*/*.onnx model_repository/*/[0-9]*/*.json model_repository/*/[0-9]*/.hotpath-build.json
