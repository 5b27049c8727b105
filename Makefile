# hotpath: the two commands a newcomer needs are `make serve` and `make test`.
VENV      ?= .venv
PY        := $(VENV)/bin/python
HOTPATH   := $(VENV)/bin/hotpath
export HF_HUB_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: setup engines serve test test-fast test-unit perf perf-quick perf-compare perf-check soak tune clean help

help:
	@echo "make serve   set up, build the model repository, start Triton, show a real request"
	@echo "make test    set up, then run every tier: unit, tools (nginx, Postgres, linters) and integration (real tritonserver)"
	@echo "make test-fast  the unit tier only: no server, no external tool, under a minute"
	@echo "make engines build the model repository (hotpath build): exports, config.pbtxt files, TensorRT plans on GPU hosts (incremental)"
	@echo "make perf    perf_analyzer sweeps of every endpoint -> perf/reports/perf.md (PERF_ARGS=--quick)"
	@echo "make perf-compare  the same, side by side with the alternatives -> perf/reports/compare.md"
	@echo "make perf-check    fail when an endpoint misses its p95 target (perf/slo.toml); refuses on a busy"
	@echo "                   machine unless HOTPATH_ALLOW_BUSY=1"
	@echo "make soak    the endpoints together for 5 minutes, unique inputs: errors, p95 and RSS over time -> perf/reports/soak.md"
	@echo "make tune ENDPOINT=text_embedding  tune an endpoint, write the winner into build/*.toml (TUNE_ARGS=--max-trials 8)"

setup:
	@bash scripts/setup.sh

# `engines` is the target users type; it runs `hotpath build` (no `build` target: build/ is the specs' folder).
engines: setup
	@$(HOTPATH) build

serve: engines
	@$(HOTPATH) serve --demo

# The build runs first, outside any test's timeout: a cold build measures text_generation's precision gate
# (minutes); the tests' built_repository fixture then finds it done.
test: engines
	@$(PY) -m pytest -q

test-fast: setup
	@$(PY) -m pytest -q tests/unit

test-unit: test-fast

perf: engines
	@$(HOTPATH) perf $(PERF_ARGS)

perf-quick: engines
	@$(HOTPATH) perf --quick

# The lab (perf/: rival servers, studies) is not installed; it runs from this folder as `python -m perf`.
perf-compare: engines
	@$(PY) -m perf compare $(PERF_ARGS)

perf-check: engines
	@$(HOTPATH) perf-check

soak: engines
	@$(PY) -m perf study soak $(SOAK_ARGS)

ENDPOINT ?= text_embedding
tune: engines
	@$(HOTPATH) tune $(ENDPOINT) $(TUNE_ARGS)

clean:
	rm -rf .hotpath model_repository/*/[0-9]*/*.onnx model_repository/*/[0-9]*/*.json model_repository/*/[0-9]*/.hotpath-build.json
