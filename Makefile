# Targets are exactly what people and CI run. Each installs what it needs into .venv first.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-dev
DEMO_TRACE := src/badput/_data/resnet50_v100_workers0.pt.trace.json.gz

.PHONY: install demo test lint format golden bench gpu-check clean

PIP_LOG := $(VENV)/pip.log
# pip's output (dozens of lines, warnings included) goes to $(PIP_LOG) and is shown only when
# pip fails, so that `make demo` prints one line about installing and then the report.
PIP = $(BIN)/python -m pip --disable-pip-version-check
PIP_FAILED = { cat $(PIP_LOG) >&2; echo "badput: pip failed; its log: $(PIP_LOG)" >&2; exit 1; }

# The C sources too: a changed scanner is rebuilt (pip's editable install compiles them).
$(STAMP): pyproject.toml $(wildcard setup.py src/badput/trace/_scan.c src/badput/analysis/_paths.c)
	@echo "badput: installing into $(VENV) (pip's log: $(PIP_LOG))"
	@$(PY) -m venv $(VENV)
	@$(PIP) install --upgrade pip > $(PIP_LOG) 2>&1 || $(PIP_FAILED)
	@$(PIP) install -e '.[dev,all]' >> $(PIP_LOG) 2>&1 || $(PIP_FAILED)
	@# Bytecode once, as a wheel install compiles it (an editable install does not): every
	@# command then starts 0.1 s sooner, also where Python writes no bytecode itself.
	@$(BIN)/python -m compileall -q src/badput >> $(PIP_LOG) 2>&1 || $(PIP_FAILED)
	@touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	@$(BIN)/badput analyze $(DEMO_TRACE)

lint: $(STAMP)
	$(BIN)/ruff check --no-cache src tests benchmarks examples
	$(BIN)/ruff format --no-cache --check src tests benchmarks examples
	$(BIN)/mypy

format: $(STAMP)
	$(BIN)/ruff format src tests benchmarks examples
	$(BIN)/ruff check --fix src tests benchmarks examples

test: lint
	$(BIN)/pytest

# Rewrite the golden text reports after a deliberate change; review the diff before committing.
golden: $(STAMP)
	BADPUT_REGEN_GOLDEN=1 $(BIN)/pytest -q tests/test_golden.py

# Benchmarks: badput against its anchors, side by side; results land in benchmarks/results/.
# All run even if one misses a target; make fails if any does.
bench: $(STAMP)
	$(BIN)/python benchmarks/bench_analyze.py; rc=$$?; \
	$(BIN)/python benchmarks/whatif_dataloader.py || rc=1; \
	$(BIN)/python benchmarks/bench_meter.py || rc=1; \
	$(BIN)/python benchmarks/bench_ranks.py || rc=1; \
	$(BIN)/python benchmarks/bench_sampler.py || rc=1; \
	$(BIN)/python benchmarks/bench_nsys.py || rc=1; \
	$(BIN)/python benchmarks/bench_memory.py || rc=1; \
	$(BIN)/python benchmarks/bench_hostile.py || rc=1; \
	$(BIN)/python benchmarks/bench_model_cost.py || rc=1; \
	$(BIN)/python benchmarks/bench_judgement.py || rc=1; \
	exit $$rc

# GPU checks: tests marked gpu, run on a machine with an NVIDIA GPU. pytest exits 5 when no
# test is marked gpu; that is not a failure here. Then the doctor (JSON) and a 10 s sampler,
# whose summary (CPU cost included) goes to stderr; NVML comes from the nvml extra.
gpu-check: $(STAMP)
	$(BIN)/pytest -m gpu -rs; rc=$$?; [ $$rc -eq 0 ] || [ $$rc -eq 5 ]
	$(BIN)/python -c 'import pynvml' 2>/dev/null || \
		$(PIP) install 'nvidia-ml-py>=12' >> $(PIP_LOG) 2>&1 || $(PIP_FAILED)
	$(BIN)/badput doctor --format json
	mkdir -p build/gpu-check
	$(BIN)/badput telemetry record --hz 10 --out build/gpu-check/telemetry.jsonl -- sleep 10

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache build dist
