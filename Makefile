# Two commands: `make run` (set up, then start sqltopic on the embedded default data
# directory) and `make test` (set up, then ruff, mypy and pytest).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The Node.js client test's modules (tests/proto/test_node_client.py), pinned by
# tests/node/package-lock.json; reinstalled when the lock file changes.
NODE_DIR := tests/node
NODE_STAMP := $(NODE_DIR)/node_modules/.installed
DATA ?= ./sqltopic-data

.PHONY: run test lint typecheck pytest setup browser clean bench bench-server bench-fanout bench-catalog bench-pass bench-rebalance bench-backfill bench-replication bench-cluster proto

setup: $(STAMP) $(NODE_STAMP)

# The repository root is the `sqltopic` package. An editable install gives the console
# script; the link in $(VENV)/pkgroot gives the package one path that the interpreter,
# pytest and mypy all resolve the same way.
$(STAMP): pyproject.toml .ci/constraints.txt
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c .ci/constraints.txt -e '.[all,dev]'
	mkdir -p $(VENV)/pkgroot
	ln -sfn ../.. $(VENV)/pkgroot/sqltopic
	$(BIN)/python -c "import site, os; open(os.path.join(site.getsitepackages()[0], 'sqltopic-root.pth'), 'w').write(os.path.abspath('$(VENV)/pkgroot') + '\n')"
	touch $(STAMP)

# Without npm (no Node.js) nothing is installed, and the Node client test skips itself
# when `node` is missing too.
$(NODE_STAMP): $(NODE_DIR)/package.json $(NODE_DIR)/package-lock.json
	@if command -v npm >/dev/null 2>&1; then \
		npm ci --prefix $(NODE_DIR) --no-audit --no-fund --loglevel=error && touch $@; \
	else \
		echo "make: npm not found: tests/node's modules are not installed"; \
	fi

# The web console's browser test (tests/console/test_browser.py) runs headless Chromium
# from Debian's packages: installed when missing and apt-get can (root); otherwise the
# test skips itself, saying so.
browser:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 \
		|| (command -v apt-get >/dev/null 2>&1 && apt-get update -qq >/dev/null \
			&& apt-get install -y -qq chromium >/dev/null) \
		|| echo "make: chromium not installed; the console's browser test will skip"

run: $(STAMP)
	$(BIN)/sqltopic server --data $(DATA)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/pytest -q -n 0 -p no:cacheprovider tests/proto/test_generated.py

typecheck: $(STAMP)
	$(BIN)/mypy -p sqltopic
	$(BIN)/mypy tests bench

pytest: $(STAMP) $(NODE_STAMP) browser
	$(BIN)/pytest

test: lint typecheck pytest

# Regenerate the gRPC stubs from proto/sqltopic/v1/sqltopic.proto. protoc names modules
# after the path below its -I root, so the root is $(VENV)/pkgroot (which holds the
# package as `sqltopic/`): the stubs then import each other as `sqltopic.proto.sqltopic.v1`.
# tests/proto/test_generated.py runs the same command and fails when the committed files
# differ; `make lint` runs that test.
proto: $(STAMP)
	$(BIN)/python -m grpc_tools.protoc -I $(VENV)/pkgroot \
		--plugin=protoc-gen-mypy=$(BIN)/protoc-gen-mypy \
		--plugin=protoc-gen-mypy_grpc=$(BIN)/protoc-gen-mypy_grpc \
		--python_out=$(VENV)/pkgroot --grpc_python_out=$(VENV)/pkgroot \
		--mypy_out=$(VENV)/pkgroot --mypy_grpc_out=$(VENV)/pkgroot \
		$(VENV)/pkgroot/sqltopic/proto/sqltopic/v1/sqltopic.proto

bench: $(STAMP)
	$(BIN)/python bench/wal_bench.py

# The server benchmark, with Redis Streams as its peer (docs/performance.md §5, §7):
# installs redis-server from Debian's packages when it is missing (needs root).
bench-server: $(STAMP)
	command -v redis-server >/dev/null || (apt-get update && apt-get install -y redis-server)
	$(BIN)/python bench/server_bench.py

# Many topics and consumers on one server, idle subscribers, wide Arrow writes (issue 14).
bench-fanout: $(STAMP)
	$(BIN)/python bench/fanout_bench.py

# What catalog changes (CREATE TOPIC, a new child table) cost the shared pass (issue 14).
bench-catalog: $(STAMP)
	$(BIN)/python bench/catalog_bench.py

# The shared pass and its deliveries in process, one subscriber against many (issue 14).
bench-pass: $(STAMP)
	$(BIN)/python bench/pass_bench.py

# Consumer-group rebalances: join, leave, crash takeover (docs/performance.md §6).
bench-rebalance: $(STAMP)
	$(BIN)/python bench/rebalance_bench.py

# The Spark backfill against one live consumer on the same history (docs/performance.md, Backfill).
bench-backfill: $(STAMP)
	$(BIN)/python bench/backfill_bench.py

# A cluster's costs so far: DDL through an mnode, a dnode's failure (docs/performance.md §12).
bench-cluster: $(STAMP)
	$(BIN)/python bench/cluster_bench.py

# What a replicated write would cost: 3 replicas on loopback (docs/replication.md §13).
bench-replication: $(STAMP)
	$(BIN)/python bench/replication_bench.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache $(NODE_DIR)/node_modules
