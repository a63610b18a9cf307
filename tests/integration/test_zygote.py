"""Zygotes: workers forked from a process that imported TensorFlow once.

Behaviour only (which process ran the cell, what the logs say, what the results are); timings are in
benchmarks/zygote.py.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import psutil
import pytest
from conftest import ended, processes_of_run_root, wait_until

from nbworkers.protocol.private.dirs import module_command

ZYGOTE_READY_TIMEOUT = 120  # seconds for a zygote to import TensorFlow on a busy 2-core machine
HOST_RUN_TIMEOUT = 180  # seconds for one host + worker run (a fallback spawn imports TensorFlow)
FORKED_LINE = "--- nbworkers: forked from zygote"

# Each worker trains on its own data with MWMS's custom loop: equal weights on both mean the all-reduce ran.
TRAIN_CELL = """%%worker -n 2 --block --name {name}
import os
import numpy as np
import tensorflow as tf
strategy = tf.distribute.MultiWorkerMirroredStrategy()
rng = np.random.RandomState(int(os.environ["NBWORKERS_WORKER"]))
x = tf.constant(rng.rand(16, 4).astype("float32"))
with strategy.scope():
    w = tf.Variable(tf.ones((4, 1)))
@tf.function
def step():
    def replica():
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.matmul(x, w) ** 2)
        grad = tape.gradient(loss, w)
        grad = tf.distribute.get_replica_context().all_reduce("mean", grad)
        w.assign_sub(0.1 * grad)
    strategy.run(replica)
for _ in range(3):
    step()
print("CHECKSUM", repr(float(tf.reduce_sum(w))))
print("FORKED", os.environ.get("NBWORKERS_FORKED", "no"), "CWD", os.getcwd(), "CUDA", os.environ.get("CUDA_VISIBLE_DEVICES"))
"""

PID_CELL = """%%worker -n 2 --block --name {name}
import os
print("FORKED", os.environ.get("NBWORKERS_FORKED", "no"))
"""




def run_ok(kernel, cell: str) -> None:
    result = kernel.run(cell)
    assert not result.error and result.status == "ok", result.text


def worker_log(run_root: Path, name: str, index: int = 0) -> str:
    return (run_root / name / f"worker-{index}.log").read_text()


def gone_or_zombie(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def zygote_pids(kernel) -> list[int]:
    return [z["pid"] for z in kernel.value(
        "[z for z in __import__('nbworkers.magics.backends.zygotes', fromlist=['z']).zygotes().describe() "
        "if z['alive']]")]


# ------------------------------------------------------------------------------------------- unit


# A zygote in a subprocess; RUN_OP starts TensorFlow's runtime in it before it serves (what the guard must refuse).
ZYGOTE_SCRIPT = textwrap.dedent("""
    import os, sys
    from nbworkers.distlib.worker import zygote
    z = zygote.Zygote(sys.argv[1])
    zygote.preload()
    assert zygote.fork_refusal() is None, zygote.fork_refusal()
    if os.environ.get("RUN_OP") == "1":
        import tensorflow as tf
        print("op", int(tf.constant(1) + 1), flush=True)
        print("refusal:", zygote.fork_refusal(), flush=True)
    zygote.leave(z.serve())  # as main() ends: no finalisation over TensorFlow (10 s at load 10)
""")


def run_host(tmp_path: Path, socket_path: Path, name: str) -> tuple[int, str]:
    cell = tmp_path / f"{name}.py"
    cell.write_text("import os, tensorflow as tf\nprint('RESULT', int(tf.constant(20) + 22), os.environ.get('NBWORKERS_FORKED', 'no'))\n")
    log = tmp_path / f"{name}.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("NBWORKERS_")}
    env.update({"NBWORKERS_CODE": str(cell), "NBWORKERS_CWD": str(tmp_path), "TF_CPP_MIN_LOG_LEVEL": "2"})
    command = [*module_command(sys.executable, "nbworkers.host.worker_host", "--log", str(log), "--zygote",
                               str(socket_path), "--zygote-timeout", "150"),
               "--", *module_command(sys.executable, "nbworkers.distlib.worker.bootstrap", unbuffered=True)]
    host = subprocess.Popen(command, stdin=subprocess.PIPE, env=env, cwd=tmp_path, start_new_session=True)
    try:  # its stdin stays open (end of file would mean: the kernel died, stop the worker)
        code = host.wait(timeout=HOST_RUN_TIMEOUT)
    finally:
        host.stdin.close()
        if host.poll() is None:
            os.killpg(host.pid, signal.SIGKILL)
            host.wait()
    return code, log.read_text()


@pytest.mark.parametrize("run_op", [False, True], ids=["fresh", "runtime-started"])
def test_guard_refuses_to_fork_once_the_runtime_started(tmp_path, run_op):
    socket_path = tmp_path / "z.sock"
    zlog = open(tmp_path / "zygote.log", "wb")
    server = subprocess.Popen([sys.executable, "-c", ZYGOTE_SCRIPT, str(socket_path)], stdin=subprocess.PIPE,
                              stdout=zlog, stderr=subprocess.STDOUT, start_new_session=True,
                              env={**os.environ, "RUN_OP": "1" if run_op else "0", "TF_CPP_MIN_LOG_LEVEL": "2"})
    try:
        code, log = run_host(tmp_path, socket_path, "cell")
        zygote_output = (tmp_path / "zygote.log").read_text()
        assert code == 0, log + zygote_output
        if run_op:
            assert "refusal: TensorFlow's runtime has started" in zygote_output, zygote_output
            assert "zygote refused: TensorFlow's runtime has started" in log and "spawning this worker" in log, log
            assert "RESULT 42 no" in log, log  # ... and the host spawned the worker instead
        else:
            assert FORKED_LINE in log and f"RESULT 42 {server.pid}" in log, log
    finally:
        server.stdin.close()  # end of file: the zygote exits (as when its kernel dies)
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
            pytest.fail("the zygote did not exit at end of file on its stdin")
        zlog.close()


def test_a_forked_worker_whose_host_is_killed_is_killed_by_the_zygote(tmp_path):
    """The host is the supervisor; when it dies (kill -9, nothing to clean up), its forked worker must not stay."""
    socket_path = tmp_path / "z.sock"
    server = subprocess.Popen([sys.executable, "-c", ZYGOTE_SCRIPT, str(socket_path)], stdin=subprocess.PIPE,
                              stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, start_new_session=True,
                              env={**os.environ, "RUN_OP": "0", "TF_CPP_MIN_LOG_LEVEL": "2"})
    cell = tmp_path / "sleepy.py"
    cell.write_text("import os, time\nprint('WORKER', os.getpid(), flush=True)\ntime.sleep(600)\n")
    log = tmp_path / "sleepy.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("NBWORKERS_")}
    env.update({"NBWORKERS_CODE": str(cell), "NBWORKERS_CWD": str(tmp_path)})
    command = [*module_command(sys.executable, "nbworkers.host.worker_host", "--log", str(log), "--zygote",
                               str(socket_path)),
               "--", *module_command(sys.executable, "nbworkers.distlib.worker.bootstrap", unbuffered=True)]
    host = subprocess.Popen(command, stdin=subprocess.PIPE, env=env, cwd=tmp_path, start_new_session=True)
    try:
        assert wait_until(lambda: "WORKER" in log.read_text() if log.exists() else False, ZYGOTE_READY_TIMEOUT)
        text = log.read_text()
        assert FORKED_LINE in text, text
        worker = int(re.search(r"WORKER (\d+)", text).group(1))
        assert psutil.Process(worker).ppid() == server.pid and os.getpgid(worker) == worker  # own group
        os.killpg(host.pid, signal.SIGKILL)
        host.wait()
        assert wait_until(lambda: ended(worker), 10), "the forked worker outlived its host"
    finally:
        host.stdin.close()
        server.stdin.close()
        server.wait(timeout=10)


# ------------------------------------------------------------------------------------------- through a kernel


def test_forked_workers_train_alike_serve_a_session_and_die_with_the_kernel(kernel, run_root):
    run_ok(kernel, TRAIN_CELL.format(name="forked"))
    logs = [worker_log(run_root, "forked", i) for i in range(2)]
    [zygote] = zygote_pids(kernel)
    for text in logs:
        assert FORKED_LINE in text and f"FORKED {zygote} CWD {kernel.notebook_dir} CUDA -1" in text, text[-3000:]
    checksums = [re.findall(r"CHECKSUM (\S+)", text) for text in logs]
    assert all(len(c) == 1 for c in checksums) and checksums[0] == checksums[1], checksums
    assert kernel.value("'tensorflow' in __import__('sys').modules") is False
    # the kernel's log tails (what the widget, the summary and the cell show) leave the fork line to the file
    tails = kernel.value("[w['log_tail'] for w in __import__('nbworkers').get_cluster('forked').snapshot()['workers']]")
    assert any("CHECKSUM" in line for tail in tails for line in tail), tails
    assert not [line for tail in tails for line in tail if line.startswith("--- nbworkers:")], tails

    # a session on forked workers: state kept between cells
    run_ok(kernel, "%%worker -n 2 --session zs --block\nimport os\ncounter = 41\n")
    result = kernel.run("%%worker --session zs --block\ncounter += 1\nprint('SESSION', counter, os.environ.get('NBWORKERS_FORKED'))")
    assert not result.error and result.status == "ok", result.text
    session_logs = [worker_log(run_root, "zs", i) for i in range(2)]
    for text in session_logs:
        assert f"SESSION 42 {zygote}" in text, text[-3000:]

    # `%workers` lists the idle zygote with its memory
    listing = kernel.run("%workers").text
    assert "zygotes (idle, TensorFlow imported once" in listing and f"pid {zygote} " in listing, listing

    # the kernel killed with -9: the zygote and the session's workers go too
    assert any(p.pid == zygote for p in processes_of_run_root(run_root, zygotes=True))
    os.kill(kernel.pid, signal.SIGKILL)
    assert wait_until(lambda: not processes_of_run_root(run_root, zygotes=True), 20), \
        f"outlived a kill -9 of their kernel: {[p.cmdline() for p in processes_of_run_root(run_root, zygotes=True)]}"
    # an exiting zygote has no /proc environment left for the search above a moment before it is a zombie, and
    # its exit takes a while to free 0.5 GB: wait for that exit to end
    assert wait_until(lambda: gone_or_zombie(zygote), 20), "the zygote outlived a kill -9 of its kernel"


def test_a_dead_zygote_is_replaced_and_the_launch_spawns_with_a_note(kernel, run_root):
    run_ok(kernel, PID_CELL.format(name="first"))
    [first] = zygote_pids(kernel)
    assert f"FORKED {first}" in worker_log(run_root, "first")
    os.kill(first, signal.SIGKILL)
    assert wait_until(lambda: not zygote_pids(kernel), 10)

    run_ok(kernel, PID_CELL.format(name="second"))  # finds it dead: spawned, noted; a new one starts
    for i in range(2):
        text = worker_log(run_root, "second", i)
        assert f"the zygote {first} died" in text and "this launch spawns its workers" in text, text
        assert "FORKED no" in text, text

    run_ok(kernel, PID_CELL.format(name="third"))
    [second] = zygote_pids(kernel)
    assert second != first
    for i in range(2):
        assert f"FORKED {second}" in worker_log(run_root, "third", i)


def test_zygote_off_spawns(kernel, run_root):
    run_ok(kernel, "nbworkers.settings().zygote = False")
    run_ok(kernel, PID_CELL.format(name="spawned").replace("-n 2", "-n 1"))
    assert "FORKED no" in worker_log(run_root, "spawned")
    assert zygote_pids(kernel) == []


def test_a_released_zygote_lets_its_running_workers_finish(kernel, run_root):
    """zygotes_max=1: a launch with another import-time environment releases the older zygote, whose forked
    worker of a still running cluster must finish normally (not be killed, not lose its exit code)."""
    run_ok(kernel, "nbworkers.settings().zygotes_max = 1")
    run_ok(kernel, "%%worker -n 1 --name long\nimport os, time\nprint('LONG', os.environ.get('NBWORKERS_FORKED'), flush=True)\n"
                   "time.sleep(12)\nprint('LONG DONE')\n")
    assert wait_until(lambda: (run_root / "long" / "worker-0.log").exists()
                      and "LONG " in worker_log(run_root, "long"), ZYGOTE_READY_TIMEOUT)
    [first] = zygote_pids(kernel)
    assert f"LONG {first}" in worker_log(run_root, "long")
    run_ok(kernel, PID_CELL.format(name="legacy").replace("-n 2", "-n 1 --env TF_USE_LEGACY_KERAS=1"))
    [second] = zygote_pids(kernel)
    assert second != first and f"FORKED {second}" in worker_log(run_root, "legacy")
    run_ok(kernel, "assert nbworkers.get_cluster('long').wait(120)")
    snap = kernel.value("nbworkers.get_cluster('long').snapshot()")
    assert snap["status"] == "finished", snap["error"]
    assert "LONG DONE" in worker_log(run_root, "long")
    assert wait_until(lambda: ended(first), 10)


def test_an_idle_zygote_exits_and_the_next_run_starts_a_new_one_quietly(kernel, run_root):
    run_ok(kernel, "nbworkers.settings().zygote_idle_timeout = 1.0")
    run_ok(kernel, PID_CELL.format(name="before-idle"))
    [first] = zygote_pids(kernel)
    assert f"FORKED {first}" in worker_log(run_root, "before-idle")
    assert wait_until(lambda: not zygote_pids(kernel), 20), "the zygote did not exit once idle"
    assert not psutil.pid_exists(first)  # reaped by the kernel (describe() polls it)

    run_ok(kernel, PID_CELL.format(name="after-idle"))
    [second] = zygote_pids(kernel)
    assert second != first
    for i in range(2):
        text = worker_log(run_root, "after-idle", i)
        assert f"FORKED {second}" in text and "died" not in text, text  # a new zygote, not a fallback with a note


def prewarming_kernel(notebook_dir: Path, kernel_env: dict):
    """A kernel of its own with the prewarm on (conftest's kernels have it off), nbworkers loaded."""
    from conftest import Kernel

    notebook_dir.mkdir()
    k = Kernel(notebook_dir, {**kernel_env, "NBWORKERS_ZYGOTE_PREWARM": "1"},
               kernel_cmd=[sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"])
    try:
        run_ok(k, "%load_ext nbworkers\nimport nbworkers")
    except BaseException:
        k.shutdown()
        raise
    return k


def test_the_zygote_prewarmed_at_load_serves_the_first_run(tmp_path, kernel_env, run_root):
    k = prewarming_kernel(tmp_path / "prewarm-notebook", kernel_env)
    try:
        [prewarmed] = zygote_pids(k)  # started by %load_ext, before any %%worker
        assert k.value("'tensorflow' in __import__('sys').modules") is False  # imported there, not here
        run_ok(k, PID_CELL.format(name="first-run"))
        for i in range(2):
            assert f"FORKED {prewarmed}" in worker_log(run_root, "first-run", i)
        assert zygote_pids(k) == [prewarmed]  # the same key: no second zygote
        run_ok(k, "nbworkers.settings().zygote_prewarm = False")
    finally:
        k.shutdown()
    assert wait_until(lambda: not processes_of_run_root(run_root, zygotes=True), 15)


def test_a_run_elsewhere_stops_the_prewarm_still_importing_and_nothing_of_it_is_left(tmp_path, kernel_env, run_root):
    """What a first ``--backend ray`` cell does before it imports Ray (``build_spec``: the backend does not run here):
    the zygote that ``%load_ext`` started, still in TensorFlow's import, is SIGKILLed with its group and reaped."""
    k = prewarming_kernel(tmp_path / "yield-notebook", kernel_env)
    try:
        [prewarmed] = zygote_pids(k)
        assert k.value("__import__('nbworkers.magics.backends.zygotes', fromlist=['z']).zygotes().yield_prewarm()") == 1
        assert zygote_pids(k) == [] and not psutil.pid_exists(prewarmed)  # gone and reaped
        assert not processes_of_run_root(run_root, zygotes=True)
    finally:
        k.shutdown()


def test_no_prewarm_when_zygotes_or_prewarming_are_off(kernel):
    assert zygote_pids(kernel) == []  # conftest: NBWORKERS_ZYGOTE_PREWARM=0
    run_ok(kernel, "nbworkers.settings().zygote_prewarm = True; nbworkers.settings().zygote = False")
    assert kernel.value("__import__('nbworkers.magics.backends.zygotes', fromlist=['z']).zygotes().prewarm()") is None
    assert zygote_pids(kernel) == []
