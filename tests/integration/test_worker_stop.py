"""A stop is quick and clean: ``%workers stop`` gives each worker a KeyboardInterrupt first (SIGINT from its host),
so the cell's ``finally:`` and its ``atexit`` functions run, and the run reads "stopped" with no worker killed by
SIGTERM or SIGKILL. Both a plain loop and one that calls ``distlib.report()`` (whose first TensorFlow op starts the
coordination service, and with it TensorFlow's own SIGTERM handler) stop so. Real kernel, real workers."""

from __future__ import annotations

import signal

import pytest
from cells import LOOP_WITH_FINALLY, worker_cell
from conftest import processes_of_run_root, wait_until

LOOPS = {  # name: (setup, body)
    "plain": ("pass", "pass"),
    # with TensorFlow imported, report() writes TensorBoard scalars: its first op starts TensorFlow's runtime
    "reporting": ("import tensorflow", "distlib.report(step=step, loss=1.0 / step)"),
}


@pytest.mark.parametrize("zygote", [True, False], ids=["forked", "spawned"])
def test_a_stop_runs_every_workers_finally_and_atexit_and_reads_stopped(kernel, run_root, tmp_path, zygote):
    # What is tested is that the clean-up runs and nothing needs SIGTERM or SIGKILL, not how fast (the Stop's time is
    # measured in benchmarks/): a grace longer than the default 5 s, so that a CPU-starved `make test` lane (CI,
    # 2026-11-28: one worker of the spawned run was SIGKILLed at 5 s) cannot fail it.
    assert not kernel.run(f"nbworkers.settings().zygote = {zygote}; nbworkers.settings().stop_grace = 20").error
    for name, (setup, body) in LOOPS.items():
        marker = str(tmp_path / name)
        cell = LOOP_WITH_FINALLY.format(marker=marker, setup=setup, body=body)
        launched = kernel.run(worker_cell(f"-n 2 --name {name}", cell))
        assert not launched.error, launched.error
        assert wait_until(lambda: kernel.run(f"%workers logs {name}").stdout.count("worker up") == 2, 120)
        if name == "reporting":  # past the first report: TensorFlow's runtime (and its SIGTERM handler) started
            assert wait_until(lambda: all(w["step"] for w in kernel.value(
                f"nbworkers.get_cluster({name!r}).snapshot()")["workers"]), 120)
        stopped = kernel.run(f"%workers stop {name}")
        assert not stopped.error, stopped.error
        snap = kernel.value(f"nbworkers.get_cluster({name!r}).snapshot()")
        assert snap["status"] == "stopped", snap
        for worker in snap["workers"]:
            shown = kernel.run(f"%workers logs {name} -w {worker['index']} --tail 40").stdout
            # (a message string, not a tuple: pytest cuts a tuple's repr short, and the log's tail is the evidence;
            # CI 2026-11-29 08:41: worker 0 of the spawned run SIGKILLed at the 20 s grace after a
            # CoordinationServiceError naming worker 1, its tail cut off: not reproduced in 4 runs at load 6)
            assert worker["status"] == "stopped", f"{worker}\n{shown}"
            assert worker["exit_code"] not in (-signal.SIGKILL, -signal.SIGTERM), f"{worker}\n{shown}"
        for i in range(2):
            assert (tmp_path / f"{name}-finally-{i}").read_text().startswith("finally ran"), f"{name} worker {i}"
            assert (tmp_path / f"{name}-atexit-{i}").read_text() == "atexit ran", f"{name} worker {i}"
        assert "--- nbworkers: stopped" in kernel.run(f"%workers logs {name} -w 0 --tail 5").stdout
        assert not processes_of_run_root(run_root)
    waited = kernel.run("%workers wait reporting")  # a user's stop is not a failure: the wait does not raise
    assert not waited.error, waited.error


DROPPED_INTERRUPT = """
import gc, signal, sys, threading, time
from nbworkers.distlib.worker import stop_signal
stop_signal.install()
inside = threading.Event()

def slow_callback(phase, info):  # as JAX's _xla_gc_callback: Python code that a collection runs
    if phase == "start" and not inside.is_set():
        inside.set()
        spin = time.monotonic()
        while time.monotonic() - spin < 0.5:  # the SIGINT's handler runs here, and Python drops what it raises
            pass

gc.callbacks.append(slow_callback)
threading.Thread(target=lambda: inside.wait() and signal.pthread_kill(threading.main_thread().ident, signal.SIGINT),
                 daemon=True).start()
start = time.monotonic()
try:
    while time.monotonic() - start < 20:
        gc.collect()
        time.sleep(0.01)
    print("RAN ON", flush=True)
except KeyboardInterrupt:
    print(f"INTERRUPTED stop={stop_signal.requested()} after {time.monotonic() - start:.1f} s", flush=True)
"""


def test_a_stops_interrupt_that_python_drops_in_a_gc_callback_comes_again(tmp_path):
    """A SIGINT whose handler ran inside a garbage collection's callback (JAX registers one; TensorFlow 2.21 imports
    JAX when installed) raised a KeyboardInterrupt Python dropped: the worker ran on to SIGKILL (CI, 2026-11-29).
    The stop's interrupt now comes again and reaches the code."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-P", "-c", DROPPED_INTERRUPT], capture_output=True, text=True,
                          cwd=tmp_path, timeout=60)
    assert "INTERRUPTED stop=True" in done.stdout, (done.stdout, done.stderr)
    assert "the interrupt landed in slow_callback, where Python drops it: interrupting again" in done.stderr
    assert "Exception ignored" not in done.stderr  # said once, in the worker's words, not as a traceback
