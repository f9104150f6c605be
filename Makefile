# Two commands do all set-up on a fresh machine:
#   make demo   create .venv, install isotropy, run `isotropy demo`
#   make test   create .venv, install isotropy with its test extras, run the test suite
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
# CPU build of PyTorch, pinned so that an unpinned install never pulls a multi-GB CUDA build.
TORCH_PIN ?= torch==2.13.0

.PHONY: demo test lint bench clean

$(VENV)/.installed: pyproject.toml Makefile
	python3 -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet "$(TORCH_PIN)"
	$(PIP) install --quiet -e ".[test]"
	touch $@

demo: $(VENV)/.installed
	HF_HUB_OFFLINE=1 $(VENV)/bin/isotropy demo

test: $(VENV)/.installed
	HF_HUB_OFFLINE=1 $(PY) -m pytest -q
	$(VENV)/bin/ruff check src tests benchmarks

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check src tests benchmarks

bench: $(VENV)/.installed
	$(PY) benchmarks/run_all.py

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info
