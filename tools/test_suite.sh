#!/usr/bin/env bash
# `make test` after its set-up: the unit tests, the Ray tests alone, then the rest as the runs of tests/tracks.py
# in three lanes at once (most tests wait: for a kernel, a worker's import, a grace period, a browser):
#   unit                                  .venv            tests/unit (seconds)
#   ray                                   .venv            the Ray tests, alone (tests/tracks.py says why)
#   lane 1: processes                     .venv            launches, zygotes, roles, stops, kill -9s, restarts
#   lane 2: main                          .venv            the rest
#   lane 3: beside, then installed        .venv            the browser tests and tutorial notebooks, while
#                                                          .venv-installed is made (make installed-venv), then
#                                         .venv-installed  the tests marked `installed`, on the wheel users get
# Lanes 1 and 3 print into build/test-logs/lane-<n>.log, shown after lane 2's output. Every run goes on when one
# before it failed. The last line adds them up (tools/suite_summary.py); the exit status is non-zero when any run
# failed (pytest's 5, nothing selected, is not a failure). PYTEST_ARGS (from make) goes to every run, e.g.
# PYTEST_ARGS='-m "not slow"' or '-x'.
set -u
cd "$(dirname "$0")/.."
VENV_PY=.venv/bin/python
LOGS=build/test-logs
mkdir -p "$LOGS"
rm -f "$LOGS"/*.xml "$LOGS"/*.log "$LOGS"/*.code
eval "extra=(${PYTEST_ARGS:-})"
RUNS=(unit ray processes main beside installed)

# run NAME PYTEST ARGS...: one pytest run whose JUnit XML is $LOGS/NAME.xml; its exit code goes to $LOGS/NAME.code.
run() {
  local name=$1; shift
  "$@" --junitxml="$LOGS/$name.xml" "${extra[@]}"
  echo $? > "$LOGS/$name.code"
}
# .venv-installed's own pytest script, not `python -m pytest`, which would put the checkout's root (its folders
# distlib/, magics/...) first on sys.path; --track=installed refuses to run on anything but the installed package.
INSTALLED_PYTEST=(.venv-installed/bin/pytest -p no:cacheprovider --rootdir="$PWD" tests/integration --track=installed)
# test_packaging.py checks the wheel `make test` built (its set-up) instead of building one of its own.
WHEEL=$(ls dist/nbworkers-*-py3-none-any.whl 2>/dev/null | head -1)
export NBWORKERS_WHEEL=${WHEEL:+$PWD/$WHEEL}

run unit "$VENV_PY" -m pytest tests/unit

run ray "$VENV_PY" -m pytest tests/integration --track=ray

run processes "$VENV_PY" -m pytest tests/integration --track=processes > "$LOGS/lane-1.log" 2>&1 &
lane1=$!
( make --no-print-directory installed-venv > "$LOGS/installed-env.log" 2>&1 & env_pid=$!
  run beside "$VENV_PY" -m pytest tests/integration --track=beside
  if wait "$env_pid"; then
    run installed "${INSTALLED_PYTEST[@]}"
  else
    echo "make installed-venv failed: see $LOGS/installed-env.log"; tail -20 "$LOGS/installed-env.log"
  fi ) > "$LOGS/lane-3.log" 2>&1 &
lane3=$!
run main "$VENV_PY" -m pytest tests/integration --track=main
wait "$lane1" "$lane3"
for lane in 1 3; do
  echo "=== lane $lane (also in $LOGS/lane-$lane.log) ==="
  cat "$LOGS/lane-$lane.log"
done

status=0
for name in "${RUNS[@]}"; do
  code=$(cat "$LOGS/$name.code" 2>/dev/null || echo 1)
  [ "$code" -eq 0 ] || [ "$code" -eq 5 ] || { echo "run '$name' failed (pytest exit $code)"; status=1; }
done
reports=()
for name in "${RUNS[@]}"; do reports+=("$LOGS/$name.xml"); done
"$VENV_PY" tools/suite_summary.py "${reports[@]}" || status=1
exit $status
