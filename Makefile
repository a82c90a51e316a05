# make demo   bootstrap .venv, install, run the demo job on the embedded default sinks
# make test   bootstrap and run the whole suite
# make test-fast  the suite without the multi-process tests (marked slow): under a minute
# make test-stress  the suite under a CPU hog on one core, and the fast suite with clocks sped and slowed
# make faults the fault suite (tests/faults, also part of make test); its table goes into docs/faults-table.md
# make bench  benchmarks; results go to bench/RESULTS.md
# make typecheck  basedpyright over telemetry/ (its settings: [tool.basedpyright] in pyproject.toml)
# make lint   ruff check and ruff format --check over the package, tests, bench, examples and scripts; the import contracts
# make docs   the manual, built with mkdocs build --strict into a temporary folder (a warning fails it)
# (make test runs these three checks too: tests/deploy/test_lint.py, tests/deploy/test_docs.py)
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
EXTRAS := dev,otel,dashboard,gpu,hf,lightning

.PHONY: demo test test-fast test-stress faults bench typecheck lint docs clean system-deps

# pip runs quietly; these lines say what it is doing (the first set-up takes about a minute).
$(STAMP): pyproject.toml constraints-cpu.txt
	@echo "make: [1/3] creating $(VENV)"
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@echo "make: [2/3] installing torch (the CPU build, pinned in constraints-cpu.txt)"
	@$(PY) -m pip install -q -c constraints-cpu.txt torch
	@echo "make: [3/3] installing training-telemetry with its extras ($(EXTRAS))"
	@$(PY) -m pip install -q -c constraints-cpu.txt -e '.[$(EXTRAS)]'
	@touch $@
	@echo "make: $(VENV) is ready"

demo: $(STAMP)
	$(VENV)/bin/telemetry demo $(ARGS)

system-deps:
	@scripts/system-deps.sh

# pytest exits 5 when it collected no tests: that is a failure here, not a pass.
# Two workers (pytest-xdist, --dist loadfile: a module's tests stay together; see tests/README.md), then
# the tests marked `alone` with nothing beside them (scripts/suite.sh).
WORKERS ?= 2
test: $(STAMP) system-deps
	@PY=$(PY) WORKERS=$(WORKERS) scripts/suite.sh $(PYTEST_ARGS)

test-fast: $(STAMP)
	@$(PY) -m pytest -n $(WORKERS) --dist loadfile -m "not slow" $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "make test-fast: pytest collected no tests" >&2; exit 1; fi; exit $$rc

# The suite as a busy machine runs it: a CPU hog on one core, then the fast suite with the clocks sped
# and slowed (scripts/stress.sh; its figures go in bench/RESULTS.md, "Stress").
test-stress: $(STAMP) system-deps
	@scripts/stress.sh

# The fault suite alone; it prints the table of faults and what they cost, and writes the manual's page of it.
faults: $(STAMP) system-deps
	@$(PY) -m pytest tests/faults $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "make faults: pytest collected no tests" >&2; exit 1; fi; \
	if [ $$rc -ne 0 ]; then exit $$rc; fi
	@$(PY) tests/faults/table.py --write >/dev/null && echo "make faults: the table is in docs/faults-table.md"

# Each check alone, in seconds (the suite runs them all, in tests/deploy/).
LINT_TREES := telemetry tests bench examples scripts

typecheck: $(STAMP)
	$(VENV)/bin/basedpyright --pythonpath $(PY)

lint: $(STAMP)
	$(VENV)/bin/ruff check $(LINT_TREES)
	$(VENV)/bin/ruff format --check $(LINT_TREES)
	$(VENV)/bin/lint-imports

docs: $(STAMP)
	@site=$$(mktemp -d) && trap 'rm -rf "$$site"' EXIT && \
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir "$$site" && \
	echo "make docs: the manual builds (mkdocs build --strict)"

bench: $(STAMP)
	$(PY) bench/overhead.py --out bench/RESULTS.md
	$(PY) bench/exporters.py --out bench/RESULTS.md
	$(PY) bench/detectors/evaluate.py --out bench/RESULTS.md
	$(PY) bench/dashboard.py --out bench/RESULTS.md
	$(PY) bench/series.py --out bench/RESULTS.md
	# exits 1 when a rank count is not borne (said in its section): the other benchmarks still run
	-$(PY) bench/scrape_load.py --ranks 1000,5000,10000,10000 --levels full,full,full,job --out bench/RESULTS.md
	$(PY) bench/store.py --out bench/RESULTS.md
	$(PY) bench/compaction.py --out bench/RESULTS.md
	$(PY) bench/coarse.py --huge --scenarios --out bench/RESULTS.md
	$(PY) bench/online_scale.py --out bench/RESULTS.md
	$(PY) bench/simulate_memory.py --out bench/RESULTS.md
	$(PY) bench/profiler_ranges.py --out bench/RESULTS.md
	$(PY) bench/prometheus_parity.py --out bench/RESULTS.md
	$(PY) bench/trace_shapes.py --out bench/RESULTS.md
	$(PY) bench/functional_cost.py --out bench/RESULTS.md
	$(PY) bench/capture_cost.py --out bench/RESULTS.md
	$(PY) bench/io_cost.py --out bench/RESULTS.md
	$(PY) bench/history.py --out bench/RESULTS.md
	$(PY) bench/history_demo.py --out bench/RESULTS.md
	$(PY) bench/hta_compare.py --out bench/RESULTS.md

clean:
	rm -rf $(VENV) build *.egg-info runs
