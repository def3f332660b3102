# Every target installs what it needs first; `make demo` and `make test` work on a fresh clone.
VENV   ?= .venv
PY     := $(VENV)/bin/python
BIN    := $(VENV)/bin
SHARED ?= ../shared/data
DEMO_ARGS ?=
BENCH_ARGS ?= --size base --threads 1

.PHONY: install demo test lint bench clean

install: $(VENV)/.installed

# torch goes in first and pinned: an unpinned resolve would pull a multi-GB CUDA build on a CPU box.
$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

# The demo reads Spec-Bench's real questions when ../shared/data has them, else the packaged prompts.
demo: install
	@if [ -f $(SHARED)/spec_bench/question.jsonl ]; then \
		$(BIN)/specbench-run task=spec_bench run.limit=12 $(DEMO_ARGS); \
	else \
		$(BIN)/specbench-run task=prompts run.limit=12 $(DEMO_ARGS); \
	fi

test: install
	$(BIN)/pytest -q

lint: install
	$(BIN)/ruff check specbench tests benchmarks
	$(BIN)/ruff format --check specbench tests benchmarks

bench: install
	$(PY) benchmarks/overhead.py $(BENCH_ARGS)
	$(PY) benchmarks/vs_hf_assisted.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
