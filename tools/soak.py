"""`make soak`: what must hold on a busy shared server, run N times beside busy processes (not part of `make test`).

Users train on machines where other jobs keep every core busy; timing there is not a quiet machine's. This runs the
checks that must hold anyway (by default the fault-tolerance tests and the sessions' Stop, error and restore checks)
``--runs`` times, with ``--busy`` processes spinning on the CPU beside them (started here, ended here by pid), and
writes what happened into build/soak/: one JUnit file and one log per run, and summary.txt (runs, failures, each
failure's test and first error line). Exit status 1 when any run failed.

    .venv/bin/python tools/soak.py --runs 3 --busy 6
    .venv/bin/python tools/soak.py --runs 5 --busy 6 -- tests/integration/test_sessions.py -k custom_loop
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ElementTree
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "build" / "soak"
SESSIONS = "tests/integration/test_sessions.py::test_"
# In this order: the first session test builds the session the next ones use. Left out: the watchdog test (its 20 s
# stall timeout is shorter than a start beside six busy processes: the watchdog then rightly restarts the group
# before the hang the test waits for).
DEFAULT_TESTS = [
    SESSIONS + "state_lives_across_three_cells_and_workers_stay_in_sync",
    SESSIONS + "stop_of_a_custom_loop_that_never_reports_stops_both_workers_at_the_same_step",
    SESSIONS + "stop_of_python_work_after_the_steps_is_a_plain_interrupt_with_the_state_kept",
    SESSIONS + "stop_interrupts_a_long_fit_and_the_next_cell_runs_in_the_same_state",
    SESSIONS + "the_notebooks_interrupt_stops_a_blocking_cell_on_both_workers_and_keeps_the_state",
    "tests/integration/test_sessions_saved_state.py",
    "tests/integration/test_fault_soak.py",
    "tests/integration/test_fault_tolerance.py", "-k", "not watchdog",
]
# The repetitions `make test` keeps short, in full here (each test's docstring says why its short count is enough).
FULL_COUNTS = {"NBWORKERS_CHAOS_RUNS": "10", "NBWORKERS_SOAK_KILLS": "10"}
STOP_WAIT_S = 60.0  # a run stopped here (Ctrl-C, SIGTERM) gets this long to tear down its kernels, then is killed
BUSY_LOOP = "while True:\n    pass\n"


def start_busy(count: int) -> list[subprocess.Popen]:
    """``count`` processes that keep a core busy each, as other users' jobs would (at the same priority)."""
    return [subprocess.Popen([sys.executable, "-I", "-c", BUSY_LOOP], stdin=subprocess.DEVNULL,
                             start_new_session=True) for _ in range(count)]


def stop_busy(processes: list[subprocess.Popen]) -> None:
    for process in processes:
        process.kill()
        process.wait()


def run_pytest(command: list[str], output) -> int:
    """pytest in a process group of its own, with FULL_COUNTS (unless set already); stopped with the soak (SIGINT: its
    fixtures end their kernels; then SIGKILL after STOP_WAIT_S)."""
    process = subprocess.Popen(command, cwd=ROOT, stdout=output, stderr=subprocess.STDOUT, start_new_session=True,
                               env={**FULL_COUNTS, **os.environ})
    try:
        return process.wait()
    except BaseException:
        os.killpg(process.pid, signal.SIGINT)
        try:
            process.wait(STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        raise


def failures_of(junit: Path) -> tuple[int, list[tuple[str, str]]]:
    """(tests run, [(test, first line of its error)]) from a pytest JUnit file."""
    if not junit.exists():
        return 0, [("pytest", "no JUnit file: the run did not start or was killed")]
    cases = ElementTree.parse(junit).getroot().iter("testcase")
    ran, failed = 0, []
    for case in cases:
        ran += 1
        for problem in [*case.findall("failure"), *case.findall("error")]:
            message = (problem.get("message") or problem.text or "").strip().splitlines()
            failed.append((f"{case.get('classname')}::{case.get('name')}", message[0][:300] if message else ""))
    return ran, failed


def soak(runs: int, busy: int, tests: list[str]) -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    lines = [f"make soak: {runs} runs of {' '.join(tests)}", f"beside {busy} busy processes on {_cores()} cores"]
    failed_runs = 0
    spinners = start_busy(busy)
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # a TERM stops as Ctrl-C does: busy processes ended
    try:
        for run in range(1, runs + 1):
            junit, log = OUT / f"run-{run}.xml", OUT / f"run-{run}.log"
            started = time.monotonic()
            with open(log, "wb") as output:
                code = run_pytest([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q",
                                   f"--junitxml={junit}", *tests], output)
            ran, failed = failures_of(junit)
            failed_runs += bool(failed or code not in (0, 5))
            lines.append(f"run {run}: {ran - len(failed)} passed, {len(failed)} failed, "
                         f"{time.monotonic() - started:.0f} s")
            lines += [f"  FAILED {test}: {why}" for test, why in failed]
            print(lines[-1 - len(failed)], flush=True)
    finally:
        stop_busy(spinners)
    lines.append(f"{runs - failed_runs} of {runs} runs passed")
    (OUT / "summary.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 1 if failed_runs else 0


def _cores() -> int:
    return os.cpu_count() or 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="soak", description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="how many times to run the tests")
    parser.add_argument("--busy", type=int, default=6, help="busy processes beside them")
    parser.add_argument("tests", nargs="*", help="pytest's arguments (after --): default the fault and session checks")
    args = parser.parse_args(argv)
    return soak(args.runs, args.busy, args.tests or DEFAULT_TESTS)


if __name__ == "__main__":
    sys.exit(main())
