#!/usr/bin/env bash
# make test: the whole suite. First every test but those marked `alone`, on $WORKERS pytest-xdist workers
# (--dist loadfile: a module's tests on one worker); then the tests marked `alone`, one at a time with
# nothing beside them (their real jobs are read two ways whose agreement a neighbour's load changes).
# Arguments go to both runs. pytest's 5 (no test collected) is a failure only when neither run collected
# one (a -k that selects only one part is fine); any other non-zero exit fails the suite.
set -u
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
WORKERS=${WORKERS:-2}
"$PY" -m pytest -n "$WORKERS" --dist loadfile -m "not alone" "$@"
a=$?
"$PY" -m pytest -n 0 -m alone "$@"
b=$?
if [ "$a" -eq 5 ] && [ "$b" -eq 5 ]; then
  echo "make test: pytest collected no tests" >&2
  exit 1
fi
for rc in "$a" "$b"; do
  if [ "$rc" -ne 0 ] && [ "$rc" -ne 5 ]; then exit "$rc"; fi
done
exit 0
