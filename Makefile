# make test / make demo work on a fresh machine: they create .venv with Python 3.12 and install what they need.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

# Python 3.12, found with no manual step: $PYTHON, a working python3.12, or pyenv's 3.12.x.
PYTHON312 := $(shell \
  for p in "$$PYTHON" python3.12 $$(command -v pyenv >/dev/null && ls -d "$$(pyenv root)"/versions/3.12*/bin/python3.12 2>/dev/null) \
           $$(ls -d $$HOME/.pyenv/versions/3.12*/bin/python3.12 /usr/local/bin/python3.12 /usr/bin/python3.12 2>/dev/null); do \
    [ -n "$$p" ] && "$$p" -c 'import sys; assert sys.version_info[:2] == (3, 12)' >/dev/null 2>&1 && { echo "$$p"; break; }; \
  done)

.PHONY: install test demo bench lint clean

$(STAMP): pyproject.toml
	@if [ -z "$(PYTHON312)" ]; then echo "Python 3.12 not found: install it or set PYTHON=/path/to/python3.12" >&2; exit 1; fi
	@echo "using $(PYTHON312)"
	[ -x $(PY) ] || $(PYTHON312) -m venv $(VENV)
	bash tools/pip_install.sh $(PY) -q --upgrade pip
	bash tools/pip_install.sh $(PY) -q -e ".[dev]"
	bash tools/install_flashinfer_cpu.sh $(PY)
	touch $(STAMP)

install: $(STAMP)

# then the GPU tests' host-side parts on a machine without CUDA (each must reach its first CUDA call)
test: $(STAMP)
	$(PY) -m pytest -q tests/unit tests/functional
	$(PY) tools/host_side_of_gpu_tests.py tests/functional -- -m gpu

demo: $(STAMP)
	$(PY) examples/decode.py

# The benchmarks on a CUDA GPU (the Triton backend: H100 / H200), each writing its table (.md) and raw .json into
# $(BENCH_OUT): the quantizer, one layer's refit, and the MoE layer against Megatron-Core's BF16 kernels (minutes).
BENCH_OUT ?= bench/results/local
bench: $(STAMP)
	@$(PY) -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else "make bench needs a CUDA GPU (the Triton MoE backend runs on H100 / H200, SM 9.0); torch sees none")'
	$(PY) bench/quantize.py --out $(BENCH_OUT)
	$(PY) bench/refit.py --out $(BENCH_OUT)
	$(PY) bench/moe_layer.py --out $(BENCH_OUT)
	@echo "tables and raw results: $(BENCH_OUT)"

lint: $(STAMP)
	$(PY) -m pip install -q ruff
	$(VENV)/bin/ruff check megatron_mxfp8_moe tests bench examples

clean:
	rm -rf $(VENV) .pytest_cache
