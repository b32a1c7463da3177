# Every target creates .venv on first use so a fresh clone needs only `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: compiled test lint typecheck unit chaos demo demo-serve image bench bench-core bench-assess bench-drift bench-store bench-daemon bench-daemon-fleets bench-daemon-domains bench-daemon-drifts bench-console clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q -U pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

# COMPILE=1: the hot path compiled with mypyc (capwatch/native.py, docs/performance.md
# "Compiled modules"), rebuilt whenever one of its sources changes; opt-in until it has
# been through the whole suite and quiet benchmarks. COMPILE=0 (the default) runs
# everything as pure Python, as does a machine without a C compiler or Python headers.
# A build older than its sources is never run: the package then loads them from source,
# with a warning.
COMPILE ?= 0
NATIVE := capwatch/native.json
NATIVE_SRC := $(addprefix capwatch/,$(addsuffix .py,$(subst .,/,$(shell \
	sed -n 's/^    "capwatch\.\([a-z_.]*\)",$$/\1/p' capwatch/native.py))))
ifeq ($(COMPILE),0)
export CAPWATCH_PURE_PYTHON := 1
endif

compiled: $(if $(filter 0,$(COMPILE)),$(STAMP),$(NATIVE))

$(NATIVE): $(STAMP) setup.py capwatch/native.py $(NATIVE_SRC)
	@if ! command -v $${CC:-cc} >/dev/null 2>&1; then \
	  echo "no C compiler ($${CC:-cc}): the hot path runs as pure Python"; \
	elif ! $(BIN)/python -c 'import os, sys, sysconfig; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))'; then \
	  echo "no Python headers (Debian: python3-dev): the hot path runs as pure Python"; \
	else \
	  $(BIN)/pip install -q "setuptools>=77" && \
	  CAPWATCH_COMPILE=1 $(BIN)/python setup.py -q build_ext --inplace >.native-build.log 2>&1 \
	  || { tail -40 .native-build.log; exit 1; }; \
	fi

lint: $(STAMP)
	$(BIN)/ruff check capwatch tests benchmarks helm deploy

typecheck: $(STAMP)
	$(BIN)/mypy --strict capwatch

test: lint typecheck compiled
	$(BIN)/pytest -q

unit: compiled
	$(BIN)/pytest -q -m "not integration"

# The long chaos run of issue 12 (docs/reliability.md): the reproductions of its table,
# then 20 SIGKILL and 20 disk-full scenarios against an uninterrupted run and 100,000
# hostile messages, with the figures printed. Fails if anything still fails.
chaos: $(STAMP)
	CAPWATCH_CHAOS=1 $(BIN)/pytest -q tests/chaos/reproductions; r=$$?; \
	$(BIN)/python -m tests.chaos.long_run --json .chaos-figures.json; l=$$?; \
	exit $$(( r || l ))

demo: $(STAMP)
	$(BIN)/capwatch demo --report build/demo-report

demo-serve: $(STAMP)
	$(BIN)/capwatch demo --serve

bench: bench-core bench-assess bench-drift bench-store bench-daemon bench-daemon-domains bench-daemon-drifts bench-console

bench-core: compiled
	$(BIN)/python benchmarks/bench_consistency.py

bench-assess: compiled
	$(BIN)/python benchmarks/bench_assess.py

bench-drift: compiled
	$(BIN)/python benchmarks/bench_drift.py

bench-store: compiled
	$(BIN)/python benchmarks/bench_store.py

# FLEET=dir: the in-process rows on that fleet instead (docs/performance.md, "Other fleets").
bench-daemon: compiled
	$(BIN)/python benchmarks/bench_daemon.py $(if $(FLEET),--fleet $(FLEET))

# The in-process rows on the generated fleets unlike the simulated one (benchmarks/fleets.py),
# and on one fleet whose agents write as nine other producers would (benchmarks/producers.py;
# `--generated producers` for each way alone). mixed adds ~6 min at load 7 (no Kafka rows).
bench-daemon-fleets: compiled
	$(BIN)/python benchmarks/bench_daemon.py --generated all mixed

bench-daemon-domains: compiled
	$(BIN)/python benchmarks/bench_daemon_domains.py

bench-daemon-drifts: compiled
	$(BIN)/python benchmarks/bench_daemon_drifts.py --canary-s 0.05 --rounds 5000

bench-console: compiled
	$(BIN)/python benchmarks/bench_console.py

# The container image (deploy/image/build.sh: a Debian base made with mmdebstrap, a host-built
# wheelhouse, buildah, then a smoke test in podman). Slow and needs root: not part of `test`.
image: $(STAMP)
	PYTHON=$(abspath $(BIN)/python) deploy/image/build.sh

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache build .native-build.log $(NATIVE)
	find capwatch -name '*.so' -delete
