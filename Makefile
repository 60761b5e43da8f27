# Two entry points, both self-contained on a fresh Debian machine with Python 3.11:
#   make demo   set up .venv and run the main job
#   make test   set up .venv, the console test's browser and the PostgreSQL server the sink
#               tests start, then lint, type-check and run the tests
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

# The console's browser test drives Debian's Chromium through its driver (never a downloaded
# browser). Installed when missing (CI runs as root on a fresh Debian); without it the test
# fails, it does not skip.
BROWSER_BINARIES := /usr/bin/chromium /usr/bin/chromedriver
BROWSER_PACKAGES := chromium chromium-driver
# The PostgreSQL sink's tests start a private server from Debian's package (never a mock).
# Installed when missing; without it the tests fail, they do not skip.
POSTGRES_INITDB_GLOB := /usr/lib/postgresql/*/bin/initdb
POSTGRES_PACKAGES := postgresql
SUDO := $(shell test "$$(id -u)" -eq 0 || echo sudo)

.PHONY: demo test lint typecheck unit soak clean browser postgres

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/laminar-cluster demo

lint: $(STAMP)
	$(BIN)/ruff format --check src tests examples
	$(BIN)/ruff check src tests examples

typecheck: $(STAMP)
	$(BIN)/mypy

browser:
	@for binary in $(BROWSER_BINARIES); do test -x $$binary || missing=1; done; \
	if [ -n "$$missing" ]; then \
		echo "installing $(BROWSER_PACKAGES) for the console's browser test"; \
		log=$$(mktemp); \
		if ! { $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
			$(SUDO) apt-get install -y -qq $(BROWSER_PACKAGES); } >$$log 2>&1; then \
			cat $$log; rm -f $$log; exit 1; \
		fi; \
		rm -f $$log; \
	fi

postgres:
	@if ! ls $(POSTGRES_INITDB_GLOB) >/dev/null 2>&1; then \
		echo "installing $(POSTGRES_PACKAGES) for the PostgreSQL sink's tests"; \
		log=$$(mktemp); \
		if ! { $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
			$(SUDO) apt-get install -y -qq $(POSTGRES_PACKAGES); } >$$log 2>&1; then \
			cat $$log; rm -f $$log; exit 1; \
		fi; \
		rm -f $$log; \
	fi

# pytest runs as two sessions at once, one per core (tests/lanes.py): the `processes` tests
# (real node processes, mostly waiting on leases and timers) and, at nice 10, the rest. One
# session after the other took 13-14 min on 2 cores, the two lanes about 8. The same tests in
# one session: `$(BIN)/pytest -m "not soak"`.
test: lint typecheck browser postgres
	$(BIN)/python -m tests.lanes

soak: $(STAMP)
	$(BIN)/pytest -m soak

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis .pytest-processes.log
