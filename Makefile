# One entry point. `make lab` to learn, `make test` to check, `make reproduce`
# to re-run every notebook on this machine into reproduced/ (never over notebooks/).
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: lab test reproduce env clean

# The venv sees the system's site-packages so that a CUDA build of torch that is
# already installed is used as it is; only when no torch is importable do we
# install the CPU build pinned in the README.
$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv --system-site-packages $(VENV)
	@$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q "torch==2.13.0"
	$(PY) -m pip install -q -e .
	@touch $(STAMP)

env: $(STAMP)

lab: $(STAMP)
	$(PY) -m jupyter lab --notebook-dir=notebooks $(if $(filter 0,$(shell id -u)),--allow-root)

# Unit tests plus every notebook executed by nbmake. Records and figures that the
# notebooks write go to a scratch folder, so a test run never edits results/.
test: $(STAMP)
	HELPERS_RESULTS_DIR=.build/test-results $(PY) -m pytest tests notebooks --nbmake --nbmake-timeout=1800

reproduce: $(STAMP)
	$(PY) -m helpers.reproduce

clean:
	rm -rf .build reproduced
