# One entry point. `make lab` to learn, `make test` to check, `make reproduce`
# to re-run every notebook on this machine into reproduced/ (never over notebooks/).
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: lab test reproduce env clean

# The venv sees the system's site-packages so that a torch that is already
# installed (a CUDA build for your GPU, say) is used as it is. Only when no torch
# is importable is the tested one installed: the `torch` extra of pyproject.toml,
# the one place that names versions. From PyPI on Linux that is the CUDA build
# (with its CUDA libraries); `make env TORCH_INDEX=https://download.pytorch.org/whl/cpu`
# takes the much smaller CPU-only build from PyTorch's own index instead.
TORCH_INDEX ?=
$(STAMP): pyproject.toml
	@test -x $(PY) || { echo "creating $(VENV)"; $(PYTHON) -m venv --system-site-packages $(VENV); }
	@$(PY) -c "import torch" 2>/dev/null || { \
	  echo "no torch importable: installing the tested one (pyproject.toml, extra 'torch'); a large download"; \
	  $(PY) -m pip install --progress-bar on -e ".[torch]" $(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX)); }
	@echo "installing the course and its packages (pyproject.toml)"
	$(PY) -m pip install --progress-bar on -e .
	@touch $(STAMP)

env: $(STAMP)

# `make lab PORT=8890 BROWSER=no` picks the port and opens no browser (on a remote machine).
# Kernels talk to the server over local sockets (IPC), not TCP: nothing leaves the machine,
# and ipykernel prints no warning about unencrypted TCP.
PORT ?= 8888
BROWSER ?= yes
lab: $(STAMP)
	$(PY) -m jupyter lab --notebook-dir=notebooks --port=$(PORT) --KernelManager.transport=ipc --KernelManager.ip=$(CURDIR)/.build/kernel \
	  $(if $(filter no,$(BROWSER)),--no-browser) $(if $(filter 0,$(shell id -u)),--allow-root)

# Unit tests plus every notebook executed by nbmake. Records and figures that the
# notebooks write go to a scratch folder, so a test run never edits results/. The kernel
# libraries are built first, all at once: otherwise both test processes stop to build the
# same library (the fast path that build.load("selu_vectorized") loads), one waiting on the
# other. The notebooks' build_ahead then does nothing: each build cell compiles in its own
# cell, once, instead of also in a process of its own beforehand.
test: $(STAMP)
	$(PY) -m helpers.reproduce
	HELPERS_PREBUILT=1 HELPERS_RESULTS_DIR=.build/test-results $(PY) -m pytest tests notebooks --nbmake --nbmake-timeout=1800 -n 2 --dist loadfile

reproduce: $(STAMP)
	$(PY) -m run_notebooks

clean:
	rm -rf .build reproduced
