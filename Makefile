# make demo   bootstrap .venv, install, run the demo job on the embedded default sinks
# make test   bootstrap and run the whole suite
# make bench  benchmarks; results go to bench/RESULTS.md
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
EXTRAS := dev,otel,dashboard,gpu

.PHONY: demo test bench clean system-deps

$(STAMP): pyproject.toml constraints-cpu.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -c constraints-cpu.txt torch
	$(PY) -m pip install -q -c constraints-cpu.txt -e '.[$(EXTRAS)]'
	touch $@

demo: $(STAMP)
	$(VENV)/bin/telemetry demo $(ARGS)

system-deps:
	@scripts/system-deps.sh

# pytest exits 5 when it collected no tests: that is a failure here, not a pass.
test: $(STAMP) system-deps
	@$(PY) -m pytest $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "make test: pytest collected no tests" >&2; exit 1; fi; exit $$rc

bench: $(STAMP)
	$(PY) bench/overhead.py --out bench/RESULTS.md
	$(PY) bench/exporters.py --out bench/RESULTS.md
	$(PY) bench/detectors/evaluate.py --out bench/RESULTS.md

clean:
	rm -rf $(VENV) build *.egg-info runs
