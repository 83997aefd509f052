# Two entry points for a fresh clone: `make demo` and `make test`. Both are idempotent.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.zerotune-installed
# Installed first and by exact version: pip then finds the local CPU wheel, and the
# later `.[dev]` install sees torch satisfied instead of pulling CUDA wheels.
TORCH_SPEC ?= torch==2.13.0

.PHONY: demo test lint docs clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH_SPEC)"
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/zerotune recommend --model llama-7b

# Two workers (pytest-xdist): processes that launch ranks share one (see tests/conftest.py)
test: $(STAMP)
	$(PY) -m pytest -q -n 2 --dist loadgroup

lint: $(STAMP)
	$(VENV)/bin/ruff check zerotune tests scripts

# docs/rules.md and docs/accuracy.md's tables, regenerated from the rules and data/evidence/
docs: $(STAMP)
	$(PY) scripts/gen_docs.py

clean:
	rm -rf $(VENV)
