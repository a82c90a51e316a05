#!/usr/bin/env bash
# make test-stress: the suite as a busy machine runs it. First the whole suite (make test's command) with
# a CPU hog pinned to core 0 for its whole duration; then the fast suite (not slow) twice more with every
# clock Python code reads running at 2x and at 0.5x real time (tests/helpers/clock.py: waits and other
# processes keep real time, so timeouts meet a clock that runs fast or slow). Prints one line per part
# and its duration; exits 1 if any part failed (pytest's 5, no test collected, is a failure too).
set -u
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
WORKERS=${WORKERS:-2}
command -v taskset >/dev/null || { echo "stress: taskset (util-linux) is needed to pin the hog" >&2; exit 2; }

taskset -c 0 "$PY" -c 'while True: pass' &
HOG=$!
trap 'kill "$HOG" 2>/dev/null; wait "$HOG" 2>/dev/null' EXIT INT TERM HUP

summary=()
failed=0
run() {  # run NAME ENV... -- PYTEST_ARGS...
  local name=$1; shift
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  local t0=$SECONDS
  env "${envs[@]}" "$PY" -m pytest -n "$WORKERS" --dist loadfile -q -p no:cacheprovider "$@" ${PYTEST_ARGS:-}
  local rc=$?
  [ "$rc" -eq 5 ] && echo "stress: $name collected no tests" >&2
  [ "$rc" -ne 0 ] && failed=1
  summary+=("stress: $name: exit $rc in $((SECONDS - t0)) s")
}

run "the whole suite but the tests marked alone, a CPU hog on core 0" STRESS=1 -- -m "not alone"
WORKERS=0 run "the tests marked alone, one at a time, hog on" STRESS=1 -- -m alone
run "the fast suite, clocks x2, hog on" TELEMETRY_TEST_CLOCK_SCALE=2 -- -m "not slow"
run "the fast suite, clocks x0.5, hog on" TELEMETRY_TEST_CLOCK_SCALE=0.5 -- -m "not slow"
printf '%s\n' "${summary[@]}"
exit "$failed"
