#!/usr/bin/env bash
# `make test` after its set-up: the unit tests, then the integration tests as the runs of tests/tracks.py:
#   1. unit                      .venv           tests/unit (seconds)
#   2. ray                       .venv           the Ray tests, alone (raylets time out at start on a loaded machine)
#   3. main        | beside      .venv           the rest, | the browser tests and tutorial notebooks, which mostly
#                  | installed   .venv-installed   wait, then the tests marked `installed` on the wheel users get
# The runs on either side of "|" go on at the same time; the right side's output is kept in build/test-logs/ and
# printed after the left side's. Every run goes on even when one before it failed. The last line adds them up
# (tools/suite_summary.py); the exit status is non-zero when any run failed (pytest's 5, nothing selected, is not a
# failure). PYTEST_ARGS (from make) goes to every run, e.g. PYTEST_ARGS='-m "not slow"' or '-x'.
set -u
cd "$(dirname "$0")/.."
VENV_PY=.venv/bin/python
LOGS=build/test-logs
mkdir -p "$LOGS"
rm -f "$LOGS"/*.xml "$LOGS"/*.log "$LOGS"/*.code
eval "extra=(${PYTEST_ARGS:-})"

# run NAME PYTEST ARGS...: one pytest run whose JUnit XML is $LOGS/NAME.xml; its exit code goes to $LOGS/NAME.code.
run() {
  local name=$1; shift
  "$@" --junitxml="$LOGS/$name.xml" "${extra[@]}"
  echo $? > "$LOGS/$name.code"
}
# .venv-installed's own pytest script, not `python -m pytest`, which would put the checkout's root (its folders
# distlib/, magics/...) first on sys.path; --track=installed refuses to run on anything but the installed package.
INSTALLED_PYTEST=(.venv-installed/bin/pytest -p no:cacheprovider --rootdir="$PWD" tests/integration --track=installed)

run unit "$VENV_PY" -m pytest tests/unit
run ray "$VENV_PY" -m pytest tests/integration --track=ray
( run beside "$VENV_PY" -m pytest tests/integration --track=beside; run installed "${INSTALLED_PYTEST[@]}" ) \
  > "$LOGS/beside.log" 2>&1 &
beside_pid=$!
run main "$VENV_PY" -m pytest tests/integration --track=main
wait "$beside_pid"
echo "=== the runs beside the main one (also in $LOGS/beside.log) ==="
cat "$LOGS/beside.log"

status=0
for name in unit ray main beside installed; do
  code=$(cat "$LOGS/$name.code" 2>/dev/null || echo 1)
  [ "$code" -eq 0 ] || [ "$code" -eq 5 ] || { echo "run '$name' failed (pytest exit $code)"; status=1; }
  # a run with nothing selected writes an XML with no test: fine; a run that died writes none
  [ -f "$LOGS/$name.xml" ] || [ "$code" -eq 5 ] || status=1
done
"$VENV_PY" tools/suite_summary.py "$LOGS"/{unit,ray,main,beside,installed}.xml || status=1
exit $status
