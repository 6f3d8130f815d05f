# Two commands: `make run` (set up, then start sqltopic on the embedded default data
# directory) and `make test` (set up, then ruff, mypy and pytest).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DATA ?= ./sqltopic-data

.PHONY: run test lint typecheck pytest setup clean bench

setup: $(STAMP)

# The repository root is the `sqltopic` package. An editable install gives the console
# script; the link in $(VENV)/pkgroot gives the package one path that the interpreter,
# pytest and mypy all resolve the same way.
$(STAMP): pyproject.toml .ci/constraints.txt
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c .ci/constraints.txt -e '.[dev]'
	mkdir -p $(VENV)/pkgroot
	ln -sfn ../.. $(VENV)/pkgroot/sqltopic
	$(BIN)/python -c "import site, os; open(os.path.join(site.getsitepackages()[0], 'sqltopic-root.pth'), 'w').write(os.path.abspath('$(VENV)/pkgroot') + '\n')"
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/sqltopic demo --data $(DATA)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy -p sqltopic
	$(BIN)/mypy tests bench

pytest: $(STAMP)
	$(BIN)/pytest

test: lint typecheck pytest

bench: $(STAMP)
	$(BIN)/python bench/wal_bench.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
