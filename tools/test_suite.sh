#!/usr/bin/env bash
# `make test` after its set-up: the unit tests and the runs of tests/tracks.py (the integration tests), taken from one
# queue by LANES lanes at once (default 3; TEST_LANES=N). The machine's CPU is what limits the suite (cpu.txt: ~96%
# busy with three lanes), so the layout's job is to keep both cores busy and the lanes' last runs ending together:
# - lane 0 runs the Ray tests first (FIRST), alone among the Ray tests: one simulated cluster at a time;
# - BESIDE_RAY lanes (default 1) take from the queue from the start, beside them (a Ray run alone left ~27% of the
#   CPU idle: its nodes start and wait for health checks);
# - the other lanes start when the Ray tests end; every lane takes the next run of QUEUE when its run ends (unit and
#   distlib first, for the lane beside Ray, then the longest first; the long tracks come in two parts,
#   tests/tracks.py SPLIT_TRACKS), so the lanes stay balanced whatever the machine's speed.
# ALONE_FIRST=0 puts ray in the queue too, every lane starting at once. `installed` (the tests marked so, on
# .venv-installed, the wheel users get) comes last: .venv-installed is made (make installed-venv) from the start,
# and the lane that takes `installed` waits for it. Each run prints into build/test-logs/<run>.log (shown at the end,
# in RUNS' order) and writes <run>.xml (JUnit) and <run>.code (pytest's exit code); timeline.txt has each run's start
# and end (UTC) and its lane; ps-<run>.txt the machine's load and processes when it started; cpu.txt the CPU's use
# every 10 s. With CI=true the whole folder is kept in $HOME/.cache/nbworkers/ci-logs/<UTC start>/ (the last 5 runs;
# NBWORKERS_CI_LOGS names another folder): where an official run spent its time. Every run goes on when one before
# it failed. The last line adds them up (tools/suite_summary.py); the exit status is non-zero when any run failed
# (pytest's 5, nothing selected, is not a failure). PYTEST_ARGS (from make) goes to every run, e.g.
# PYTEST_ARGS='-m "not slow"' or '-x'.
set -u
cd "$(dirname "$0")/.."
VENV_PY=.venv/bin/python
LOGS=build/test-logs
LANES=${TEST_LANES:-3}
BESIDE_RAY=${BESIDE_RAY:-1}
if [ "${ALONE_FIRST:-1}" = 1 ]; then
  FIRST=(ray)
  QUEUE=(unit distlib processes faults-1 main-2 beside-2 main-1 beside-1 slurm installed faults-2)
else
  FIRST=()
  QUEUE=(unit ray distlib processes faults-1 main-2 beside-2 main-1 beside-1 slurm installed faults-2)
fi
[ "$BESIDE_RAY" -lt "$LANES" ] && [ ${#FIRST[@]} -gt 0 ] || BESIDE_RAY=$((LANES - 1))  # at most every other lane
RUNS=("${FIRST[@]}" "${QUEUE[@]}")
mkdir -p "$LOGS"
rm -f "$LOGS"/*.xml "$LOGS"/*.log "$LOGS"/*.code "$LOGS"/*.txt "$LOGS"/queue*
eval "extra=(${PYTEST_ARGS:-})"
SUITE_START=$(date -u +%Y-%m-%dT%H-%M-%SZ)

stamp() { date -u +%H:%M:%S; }
# note EVENT...: a line of timeline.txt (and of the output).
note() { echo "$(stamp) $*" | tee -a "$LOGS/timeline.txt"; }
[ -n "${NBWORKERS_SETUP_START:-}" ] && echo "$NBWORKERS_SETUP_START set-up started (.ci/run)" >> "$LOGS/timeline.txt"
note "suite started, $LANES lanes; $(uptime)"
# cpu.txt: every 10 s, the share of the machine's CPU time spent busy, and stolen by the hypervisor (a virtual
# machine's "steal"): where the suite left cores unused, or had them taken
( trap 'kill $! 2>/dev/null; exit 0' TERM  # its sleep too
  cpu() { local u n s i w q sq st; read -r _ u n s i w q sq st _ < /proc/stat; echo $((u + n + s + q + sq)) "$st" $((i + w)); }
  last=($(cpu))
  while sleep 10 & wait $!; do
    now=($(cpu)); d=($((now[0] - last[0])) $((now[1] - last[1])) $((now[2] - last[2]))); last=("${now[@]}")
    all=$((d[0] + d[1] + d[2])); [ "$all" -gt 0 ] || continue
    echo "$(stamp) cpu busy $((100 * d[0] / all))% steal $((100 * d[1] / all))%"
  done ) > "$LOGS/cpu.txt" &
CPU_SAMPLER=$!

# .venv-installed's own pytest script, not `python -m pytest`, which would put the checkout's root (its folders
# distlib/, magics/...) first on sys.path; --track=installed refuses to run on anything but the installed package.
INSTALLED_PYTEST=(.venv-installed/bin/pytest -p no:cacheprovider --rootdir="$PWD" $("$VENV_PY" tests/tracks.py installed))
# test_packaging.py checks the wheel `make test` built (its set-up) instead of building one of its own.
WHEEL=$(ls dist/nbworkers-*-py3-none-any.whl 2>/dev/null | head -1)
export NBWORKERS_WHEEL=${WHEEL:+$PWD/$WHEEL}

# wait_installed_env: until the background `make installed-venv` below has ended (installed-env.code says how).
wait_installed_env() { while [ ! -f "$LOGS/installed-env.code" ]; do sleep 2; done; }

# run NAME LANE: one pytest run of track NAME (tests/tracks.py), its output in $LOGS/NAME.log.
run() {
  local name=$1 lane=$2 started=$SECONDS
  { echo "=== $name: lane $lane, $(date -u)"; uptime; ps -eo pid,ppid,ni,pcpu,rss,etime,args --sort=-pcpu | cut -c1-220
  } > "$LOGS/ps-$name.txt"
  note "start $name (lane $lane)"
  local cmd
  if [ "$name" = unit ]; then
    cmd=("$VENV_PY" -m pytest tests/unit)
  elif [ "$name" = installed ]; then
    wait_installed_env
    if [ "$(cat "$LOGS/installed-env.code")" != 0 ]; then
      { echo "make installed-venv failed: see $LOGS/installed-env.log"; tail -20 "$LOGS/installed-env.log"
      } > "$LOGS/$name.log"
      echo 1 > "$LOGS/$name.code"; note "end $name: make installed-venv failed"; return
    fi
    cmd=("${INSTALLED_PYTEST[@]}")
  else  # a run of tests/tracks.py (unit is not one: asking for it printed a traceback into every CI log)
    # slurm: a user who is not root runs a notebook on the installed package (slurm/test_slurm_user.py)
    [ "$name" = slurm ] && wait_installed_env
    cmd=("$VENV_PY" -m pytest $("$VENV_PY" tests/tracks.py "$name"))
  fi
  "${cmd[@]}" --junitxml="$LOGS/$name.xml" "${extra[@]}" > "$LOGS/$name.log" 2>&1
  local code=$?
  echo $code > "$LOGS/$name.code"
  note "end $name: pytest exit $code, $(( (SECONDS - started) / 60 ))m$(( (SECONDS - started) % 60 ))s (lane $lane)"
}

# next_run: the first run of QUEUE no lane took yet (empty when none is left).
next_run() {
  (
    flock 9
    local taken
    taken=$(cat "$LOGS/queue.taken" 2>/dev/null || echo 0)
    if [ "$taken" -lt "${#QUEUE[@]}" ]; then
      echo $((taken + 1)) > "$LOGS/queue.taken"
      echo "${QUEUE[$taken]}"
    fi
  ) 9> "$LOGS/queue.lock"
}

lane() {
  local name
  while name=$(next_run) && [ -n "$name" ]; do run "$name" "$1"; done
}

( make --no-print-directory installed-venv > "$LOGS/installed-env.log" 2>&1; echo $? > "$LOGS/installed-env.code"
  note "installed-venv made (exit $(cat "$LOGS/installed-env.code"))" > /dev/null ) &
# lane 0: FIRST, then the queue; once FIRST is done, the lanes that waited for it
first_then_queue() {
  for name in "${FIRST[@]}"; do run "$name" 0; done
  local later=()
  for n in $(seq $((BESIDE_RAY + 1)) $((LANES - 1))); do lane "$n" & later+=($!); done
  lane 0
  [ ${#later[@]} -eq 0 ] || wait "${later[@]}"
}
lanes=()
first_then_queue & lanes+=($!)
for n in $(seq 1 "$BESIDE_RAY"); do lane "$n" & lanes+=($!); done
wait "${lanes[@]}"
kill "$CPU_SAMPLER" 2>/dev/null
wait
note "suite ended"

for name in "${RUNS[@]}"; do
  echo "=== $name (also in $LOGS/$name.log) ==="
  cat "$LOGS/$name.log" 2>/dev/null
done
cat "$LOGS/timeline.txt"

status=0
for name in "${RUNS[@]}"; do
  code=$(cat "$LOGS/$name.code" 2>/dev/null || echo 1)
  [ "$code" -eq 0 ] || [ "$code" -eq 5 ] || { echo "run '$name' failed (pytest exit $code)"; status=1; }
done
reports=()
for name in "${RUNS[@]}"; do reports+=("$LOGS/$name.xml"); done
"$VENV_PY" tools/suite_summary.py "${reports[@]}" || status=1

if [ "${CI:-}" = true ]; then  # keep this run's logs for the next developer on this machine (the last 5)
  archive=${NBWORKERS_CI_LOGS:-$HOME/.cache/nbworkers/ci-logs}
  mkdir -p "$archive/$SUITE_START" && cp -r "$LOGS"/. "$archive/$SUITE_START/" && rm -f "$archive/$SUITE_START"/queue*
  ls -1d "$archive"/*/ | sort | head -n -5 | xargs -r rm -rf
  echo "logs kept in $archive/$SUITE_START"
fi
exit $status
