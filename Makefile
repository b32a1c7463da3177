# Every target creates .venv on first use so a fresh clone needs only `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: compiled test lint typecheck unit chaos fuzz demo demo-serve image bench bench-core bench-assess bench-drift bench-store bench-daemon bench-daemon-fleets bench-daemon-domains bench-daemon-drifts bench-console clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q -U pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

# COMPILE=1 (the default): the hot path compiled with mypyc (capwatch/native.py,
# docs/performance.md "Compiled modules"), rebuilt whenever the build is not the one of the
# sources as they are (`native.py --check` compares the hashes of the compiled modules and
# of every capwatch module they import), and required: CAPWATCH_REQUIRE_COMPILED=1 makes
# `import capwatch` fail instead of running pure Python, so a test run or a benchmark cannot
# silently run a stale or missing build. Needs a C compiler and the Python headers
# (Debian: gcc, python3-dev; .ci/run installs them). COMPILE=0 runs everything as pure
# Python (CAPWATCH_PURE_PYTHON=1).
COMPILE ?= 1
NATIVE := capwatch/native.json
ifeq ($(COMPILE),0)
export CAPWATCH_PURE_PYTHON := 1
else
export CAPWATCH_REQUIRE_COMPILED := 1
endif

# The build starts from no extension module: one left from an earlier list of modules
# would shadow its source unseen.
compiled: $(STAMP)
ifneq ($(COMPILE),0)
	@$(BIN)/python -P capwatch/native.py --check >/dev/null || { \
	  cc="$${CC:-$$($(BIN)/python -c 'import sysconfig; print((sysconfig.get_config_var("CC") or "cc").split()[0])')}"; \
	  if ! command -v "$$cc" >/dev/null 2>&1; then \
	    echo "no C compiler ($$cc) for the compiled hot path: install one (Debian: gcc), or COMPILE=0 for pure Python" >&2; exit 1; \
	  fi; \
	  if ! $(BIN)/python -c 'import os, sys, sysconfig; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))'; then \
	    echo "no Python headers for the compiled hot path: install them (Debian: python3-dev), or COMPILE=0 for pure Python" >&2; exit 1; \
	  fi; \
	  echo "compiling the hot path (mypyc, ~1 min of CPU; log in .native-build.log)"; \
	  find capwatch -name '*.so' -delete; rm -f $(NATIVE); \
	  CAPWATCH_COMPILE=1 $(BIN)/python setup.py -q build_ext --inplace >.native-build.log 2>&1 \
	    || { tail -40 .native-build.log; exit 1; }; \
	  $(BIN)/python -P capwatch/native.py --check; }
endif

lint: $(STAMP)
	$(BIN)/ruff check capwatch tests benchmarks helm deploy

# benchmarks too (their errors hid real ones: bench_assess's research table reused the
# grid's names); fuzz_assess.py, an untyped research harness, is not checked yet.
typecheck: $(STAMP)
	$(BIN)/mypy --strict --exclude 'benchmarks/(fuzz_assess|probe_assess_rev12b)\.py$$' capwatch benchmarks tests

# The pure-Python path stays tested: the parity tests of what is compiled (the decoders,
# the monitor and drift statistics, the consistency check) run first from source too, with
# the tests that count calls inside a compiled module (a compiled module calls its own
# functions in C, past a test's patch, so they run only from source). Of tests/daemon, those
# of the compiled agent_watch (freezing, compaction, replay, sweep) and of the record path
# through batch, intake and registry (test_pipeline): ~25 s more of a 2-core machine.
PURE_DAEMON := freezing_memo freezing freezing_widened frozen_placeholders compaction \
	replay sweep pipeline
PURE_TESTS := tests/contracts tests/monitor tests/model \
	$(foreach t,$(PURE_DAEMON),tests/daemon/test_$(t).py)
test: lint typecheck compiled
ifneq ($(COMPILE),0)
	CAPWATCH_PURE_PYTHON=1 $(BIN)/pytest -q -p no:cacheprovider $(PURE_TESTS)
endif
	$(BIN)/pytest -q

unit: compiled
	$(BIN)/pytest -q -m "not integration"

# The long chaos run of issue 12 (docs/reliability.md): the reproductions of its table and
# every case of the chaos scenarios (each client kind x each fault, every seed: `make test`
# runs one each, tests/chaos/selection.py), then 20 SIGKILL and 20 disk-full scenarios
# against an uninterrupted run and 100,000 hostile messages, with the figures printed.
# Fails if anything still fails.
chaos: compiled
	CAPWATCH_CHAOS=1 $(BIN)/pytest -q tests/chaos; r=$$?; \
	$(BIN)/python -m tests.chaos.long_run --json .chaos-figures.json; l=$$?; \
	exit $$(( r || l ))

# The property tests with random examples, a new draw each run and 10 times as many
# (CAPWATCH_FUZZ_SCALE); `make test` runs them derandomized (tests/support/fuzzing.py).
FUZZ_TESTS := tests/contracts tests/daemon/test_fuzz.py
fuzz: compiled
	CAPWATCH_HYPOTHESIS=fuzz $(BIN)/pytest -q -p no:cacheprovider $(FUZZ_TESTS)

demo: compiled
	$(BIN)/capwatch demo --report build/demo-report

demo-serve: compiled
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
