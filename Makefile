# distsketch — developer entry points. `make demo` and `make test` work on a fresh clone.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
DOCS_STAMP := $(VENV)/.docs-installed

.PHONY: install test test-fast lint docs demo bench clean gpu-wheels

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install --quiet -e ".[test,bench,demo]"
	touch $(STAMP)

install: $(STAMP)

## The main job on the embedded default: digit completion, SISOKR vs IOKR (threaded scheduler,
## local zarr stores and a PNG under demo-output/).
demo: $(STAMP)
	$(BIN)/distsketch demo --output demo-output

## Full test suite (real-data tests skip cleanly when ../shared/data is absent).
test: $(STAMP)
	$(BIN)/python -m pytest --durations=25

## Lint (ruff: pyflakes and pycodestyle, configured in pyproject.toml); CI runs it first.
lint: $(STAMP)
	$(BIN)/ruff check .

## The API reference (Sphinx + numpydoc, docs/api/) in docs/_build/html: every warning is an
## error, broken cross-references included (-n); CI builds it after the lint.
$(DOCS_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet -e ".[docs]"
	touch $(DOCS_STAMP)

docs: $(DOCS_STAMP)
	rm -rf docs/api/generated
	$(BIN)/sphinx-build -E -W --keep-going -n -b html docs/api docs/_build/html

## The quick selection: every test not marked slow (nor hpc: live SLURM/MPI), so each subject
## keeps its quick checks (closed forms and dense references, each estimator's fit and predict,
## store guarantees, structure rules, the CLI). `make test` still runs everything.
test-fast: $(STAMP)
	$(BIN)/python -m pytest -m "not slow and not hpc"

## Benchmarks replace their sections of benchmarks/RESULTS.md or ENGINE.md (about 40 minutes in all here).
## benchmarks/bench_compare.py --base REV (not in this list) compares the tree with a revision.
BENCHMARKS := pass scaling casp bibtex usps decode rss store lipschitz pipelines friedman rf1 huber_scale quantile leverage cv usps_rr bibtex_rr import cli_regression
bench: $(STAMP)
	for b in $(BENCHMARKS); do $(BIN)/python benchmarks/bench_$$b.py || exit 1; done

## The wheels the lent GPU machine lacks (dask, distributed, zarr, ...; README of ../shared/wheels),
## copied into the git-ignored .gpu-wheels/ for the device tool's `carry`; skips when absent.
## Then run benchmarks/gpu_check.sh there (the invocation is at the top of that script).
GPU_WHEELS_SRC ?= ../shared/wheels/py312
gpu-wheels:
	@if ls $(GPU_WHEELS_SRC)/*.whl >/dev/null 2>&1; then \
		mkdir -p .gpu-wheels && cp -f $(GPU_WHEELS_SRC)/*.whl .gpu-wheels/ && chmod u+w .gpu-wheels/*.whl && \
		echo "gpu-wheels: $$(ls .gpu-wheels/*.whl | wc -l) wheels in .gpu-wheels/ ($$(du -sh .gpu-wheels | cut -f1))"; \
	else echo "gpu-wheels: no wheels under $(GPU_WHEELS_SRC); skipped"; fi

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache docs/_build docs/api/generated
