# Every target creates .venv on first use so a fresh clone needs only `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: test lint typecheck unit chaos demo demo-serve image bench bench-core bench-assess bench-drift bench-store bench-daemon bench-daemon-fleets bench-daemon-domains bench-daemon-drifts bench-console clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q -U pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check capwatch tests benchmarks helm deploy

typecheck: $(STAMP)
	$(BIN)/mypy --strict capwatch

test: lint typecheck
	$(BIN)/pytest -q

unit: $(STAMP)
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

bench-core: $(STAMP)
	$(BIN)/python benchmarks/bench_consistency.py

bench-assess: $(STAMP)
	$(BIN)/python benchmarks/bench_assess.py

bench-drift: $(STAMP)
	$(BIN)/python benchmarks/bench_drift.py

bench-store: $(STAMP)
	$(BIN)/python benchmarks/bench_store.py

# FLEET=dir: the in-process rows on that fleet instead (docs/performance.md, "Other fleets").
bench-daemon: $(STAMP)
	$(BIN)/python benchmarks/bench_daemon.py $(if $(FLEET),--fleet $(FLEET))

# The in-process rows on the generated fleets unlike the simulated one (benchmarks/fleets.py),
# and on one fleet whose agents write as nine other producers would (benchmarks/producers.py;
# `--generated producers` for each way alone). mixed adds ~6 min at load 7 (no Kafka rows).
bench-daemon-fleets: $(STAMP)
	$(BIN)/python benchmarks/bench_daemon.py --generated all mixed

bench-daemon-domains: $(STAMP)
	$(BIN)/python benchmarks/bench_daemon_domains.py

bench-daemon-drifts: $(STAMP)
	$(BIN)/python benchmarks/bench_daemon_drifts.py --canary-s 0.05 --rounds 5000

bench-console: $(STAMP)
	$(BIN)/python benchmarks/bench_console.py

# The container image (deploy/image/build.sh: a Debian base made with mmdebstrap, a host-built
# wheelhouse, buildah, then a smoke test in podman). Slow and needs root: not part of `test`.
image: $(STAMP)
	PYTHON=$(abspath $(BIN)/python) deploy/image/build.sh

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
