# `make app` and `make test` set everything up on first use (a virtual environment in .venv) and then run.
VENV ?= .venv
STAMP := $(VENV)/.installed

.PHONY: app test test-blas lint bench

# setup.py and the C file too: the editable install compiles the bootstrap's loop (memtui/engine/_kernels.c) in place
$(STAMP): pyproject.toml setup.py src/memtui/engine/_kernels.c src/memtui/orders/_blend.c constraints.txt tests/orders/requirements-nodeps.txt
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q -e '.[test]' -c constraints.txt
	$(VENV)/bin/pip install -q --no-deps -r tests/orders/requirements-nodeps.txt -c constraints.txt
	touch $@

app: $(STAMP)
	$(VENV)/bin/memtui $(PANEL)

# the tests in worker processes, one a core (at most 4: each may load torch); the SLURM tests share one worker, as
# they share the one-node cluster (their conftest puts them in one xdist group). PYTEST_WORKERS= runs them in one.
PYTEST_WORKERS ?= -n auto --maxprocesses 4 --dist loadgroup

test: $(STAMP)
	$(VENV)/bin/pytest $(PYTEST_WORKERS)

# the numerics tests under a second OpenBLAS kernel: another than the one this machine uses (OPENBLAS_CORETYPE, or
# what OpenBLAS picks by itself), among those the CPU can run; the long simulations (a level or coverage over many
# panels, which a last-bit change cannot move) and the benchmark scripts' tests run once, in `make test`
BLAS_TESTS ?= tests/engine tests/estimation tests/panel
test-blas: $(STAMP)
	OPENBLAS_CORETYPE=$$(sh tests/second_blas_core.sh) $(VENV)/bin/pytest $(PYTEST_WORKERS) -m "not simulation" \
		$(BLAS_TESTS)

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks
	$(VENV)/bin/ruff format --check src tests benchmarks
	$(VENV)/bin/lint-imports

bench: $(STAMP)
	$(VENV)/bin/pip install -q csdid -c constraints.txt
	$(VENV)/bin/python benchmarks/estimate.py
