# The two entry points of the README. Each one sets up everything it needs, idempotently.
#   make demo   serves examples/gateway.toml on the embedded engine (no OPA server, no opa
#               binary: it serves the committed bundle, bundles/policies.tar.gz)
#   make check  provisions a real OPA and Regal, then runs lint, types, policy tests (opa test,
#               regal lint) and the test suite
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo quickstart bench check setup lint typecheck test policy-test bundle clean

# Serving needs the gateway alone; the checks add the development tools (.[dev]).
SERVE_STAMP := $(VENV)/.installed-serve

$(SERVE_STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e .
	touch $(SERVE_STAMP)

$(STAMP): $(SERVE_STAMP)
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

setup: $(STAMP)

demo: $(SERVE_STAMP)
	$(BIN)/gateway serve --config examples/gateway.toml

# The demo's state (its audit trail and audit key, in .demo/): make clean keeps it.
.PHONY: demo-reset
demo-reset:
	rm -rf .demo

quickstart: $(SERVE_STAMP)
	$(BIN)/python examples/quickstart.py

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

policy-test:
	OPA_BIN="$$(scripts/provision-opa)" && REGAL_BIN="$$(scripts/provision-regal)" && \
	export REGAL_BIN && policies/check.sh "$$OPA_BIN"

# Recompile bundles/policies.tar.gz from policies/ (commit it with the policy change;
# policy-test fails while it differs from the sources).
bundle:
	OPA_BIN="$$(scripts/provision-opa)" && scripts/build-bundle "$$OPA_BIN"

# scripts/provision-redis installs Debian's redis-server for the Redis state backend's tests, and
# scripts/provision-mcp the real MCP clients and servers of tests/mcp/real (pinned by
# tests/mcp/real/package-lock.json and requirements.lock); scripts/provision-chromium and
# scripts/provision-playwright the browser and its driver of tests/console/ (Debian's Chromium,
# playwright-core from npm); each fails the run if it cannot.
test: $(STAMP)
	OPA_BIN="$$(scripts/provision-opa)" && export OPA_BIN && \
	REDIS_BIN="$$(scripts/provision-redis)" && export REDIS_BIN && \
	WRK_BIN="$$(scripts/provision-wrk)" && export WRK_BIN && \
	MCP_PEERS="$$(scripts/provision-mcp)" && export MCP_PEERS && \
	CHROMIUM_BIN="$$(scripts/provision-chromium)" && export CHROMIUM_BIN && \
	PLAYWRIGHT_CORE="$$(scripts/provision-playwright)" && export PLAYWRIGHT_CORE && \
	$(BIN)/python -m pytest

# The fast unit suite: no opa, no child process, no live server (tests/conftest.py marks the
# rest "integration", load tests "slow", and fails a fast test that starts a process or binds a
# socket); properties run on fewer examples. make check runs everything.
.PHONY: test-fast
test-fast: $(STAMP)
	env -u PYTHONDONTWRITEBYTECODE GATEWAY_FAST_SUITE=1 \
	$(BIN)/python -m pytest -m "not integration and not slow" -q -p no:cacheprovider

check: lint typecheck policy-test test

# docs/configuration.md, every configuration key, from the configuration models (a test
# fails while the committed file differs).
.PHONY: config-reference
config-reference: $(STAMP)
	$(BIN)/python -m gateway.service.config_reference

# docs/console/*.png, a screenshot of each operator console view, from a live demo gateway
# (Debian's Chromium driven by playwright-core; both provisioned like the tests').
.PHONY: console-screenshots
console-screenshots: $(STAMP)
	CHROMIUM_BIN="$$(scripts/provision-chromium)" && export CHROMIUM_BIN && \
	PLAYWRIGHT_CORE="$$(scripts/provision-playwright)" && export PLAYWRIGHT_CORE && \
	$(BIN)/python -m tests.console.screenshots

bench: $(STAMP)
	OPA_BIN="$$(scripts/provision-opa)" && export OPA_BIN && \
	REDIS_BIN="$$(scripts/provision-redis)" && export REDIS_BIN && \
	$(BIN)/python -m benchmarks --json benchmarks/results.json --markdown BENCHMARKS.md

# The HTTP and MCP services as shipped (gateway serve, gateway mcp) under wrk, beside a bare
# Starlette endpoint and OPA's own server; scripts/provision-wrk installs wrk when missing.
.PHONY: bench-http
bench-http: $(STAMP)
	OPA_BIN="$$(scripts/provision-opa)" && export OPA_BIN && \
	WRK_BIN="$$(scripts/provision-wrk)" && export WRK_BIN && \
	REDIS_BIN="$$(scripts/provision-redis)" && export REDIS_BIN && \
	$(BIN)/python -m benchmarks.wrk --json benchmarks/http-results.json --markdown BENCHMARKS-HTTP.md

# The reliability and security suite (faults against a real OPA, load); writes RELIABILITY.md.
# Phony on its own line: a directory of the same name exists.
.PHONY: reliability
reliability: $(STAMP)
	OPA_BIN="$$(scripts/provision-opa)" && export OPA_BIN && \
	WRK_BIN="$$(scripts/provision-wrk)" && export WRK_BIN && \
	$(BIN)/python -m reliability --json reliability/results.json --markdown RELIABILITY.md

# Gateway replicas on Linux network namespaces (needs root and iproute2): a signed policy
# rollout, bundle-server and replica faults, collected audit chains, throughput by replica
# count; writes SCALEOUT.md.
.PHONY: scaleout
scaleout: $(STAMP)
	OPA_BIN="$$(scripts/provision-opa)" && export OPA_BIN && \
	WRK_BIN="$$(scripts/provision-wrk)" && export WRK_BIN && \
	$(BIN)/python -m scaleout --json scaleout/results.json --markdown SCALEOUT.md

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis
