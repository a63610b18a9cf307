"""A session's data path (``Session.push``, ``pull``), called from ``benchmarks/run.py`` (``--only data``).

In a live 2-worker session (plain Python and NumPy: no TensorFlow needed to move data), per repetition, side by
side in the kernel process:

- copy: ``np.copyto`` of the array into one allocated beforehand (what moving the bytes costs at least in
  memory: the baseline of the ratios), and ``np.copy`` (a new array: its pages are touched for the first time);
- raw ZMQ: the same bytes through a ZMQ PUSH -> PULL pair over a Unix socket (``ipc://``) in the kernel
  process, sent and received without copies: the wire with nothing on top;
- pull: ``session.pull("big", worker=0)`` of the 64 MiB float32 array the worker holds: through shared memory
  (``protocol/session_shm.py``: the worker writes the ``.npy`` bytes into a private file, the kernel checks,
  unlinks and maps it read-only, ``MAP_POPULATE``) and, side by side, over the old socket path (frames with a
  Poly1305 MAC; ``shm_min_bytes`` set out of reach for that call);
- push: ``session.push(big=big)`` followed by a one-integer ``pull`` from the same worker, so the figure
  includes the worker's mapping (or MAC check) and its assignment (the small pull alone is measured too); both
  paths as for pull.

MB/s are MiB moved / seconds; ratios are each repetition's time against its own copy and raw ZMQ times, then
the median. Target (issue 33): pull and push through shared memory at >= 2000 MB/s.
"""

from __future__ import annotations

import statistics

TARGET_MBS = 2000.0
MIB = 64

SETUP = """%%worker -n 2 --session data --block
import numpy as np
big = np.random.default_rng(1).random({mib} * 2**18, dtype=np.float32)
"""

KERNEL_SETUP = """
import threading, time, numpy as np, zmq
from nbworkers.magics.run import sockets as _bench_sockets
_bench_session = nbworkers.session("data")
_bench_big = np.random.default_rng(1).random({mib} * 2**18, dtype=np.float32)
_bench_target = np.ones_like(_bench_big)

def _bench_copy():
    t = time.perf_counter(); np.copyto(_bench_target, _bench_big); return time.perf_counter() - t

def _bench_copy_new():  # np.copy: a new array, its pages touched for the first time (as a received array's are)
    t = time.perf_counter(); fresh = np.copy(_bench_big); elapsed = time.perf_counter() - t
    del fresh
    return elapsed

def _bench_raw():
    context = zmq.Context()
    pull, push = context.socket(zmq.PULL), context.socket(zmq.PUSH)
    address = _bench_sockets.bind(pull, "ipc", None, "bench")
    push.connect(address)
    push.send(b"warm"); pull.recv()
    t = time.perf_counter()
    push.send(memoryview(_bench_big), copy=False)
    frame = pull.recv(copy=False)
    np.frombuffer(frame.buffer, np.float32)
    elapsed = time.perf_counter() - t
    push.close(0); pull.close(0); context.term()
    return elapsed

_bench_shm_min = _bench_session.settings.shm_min_bytes

def _bench_path(old):  # old: the socket path (frames), as before shared memory
    _bench_session.settings.shm_min_bytes = 2**62 if old else _bench_shm_min

def _bench_pull(old=False):
    _bench_path(old)
    t = time.perf_counter(); back = _bench_session.pull("big", worker=0); elapsed = time.perf_counter() - t
    _bench_path(False)
    assert back.shape == _bench_big.shape
    return elapsed

def _bench_small():
    t = time.perf_counter(); _bench_session.pull("1", worker=0); return time.perf_counter() - t

def _bench_push(old=False):
    _bench_path(old)
    t = time.perf_counter()
    _bench_session.push(workers=[0], pushed=_bench_big)
    _bench_session.pull("1", worker=0)
    elapsed = time.perf_counter() - t
    _bench_path(False)
    return elapsed
"""


def bench(kernel, reps: int, log) -> dict:
    kernel.output(SETUP.format(mib=MIB), timeout=300)
    kernel.output(KERNEL_SETUP.format(mib=MIB))
    kernel.value("_bench_pull()")  # warm: the worker's data socket connects on its first pull
    rows = []
    for rep in range(reps):
        row = kernel.value("dict(copy=_bench_copy(), copy_new=_bench_copy_new(), raw=_bench_raw(), pull=_bench_pull(), small=_bench_small(), "
                           "push=_bench_push(), pull_old=_bench_pull(True), push_old=_bench_push(True))", timeout=300)
        log(f"data rep {rep + 1}/{reps}: {MIB} MiB copy {row['copy'] * 1000:.0f} ms, raw zmq {row['raw'] * 1000:.0f} ms, "
            f"pull {row['pull'] * 1000:.0f} ms (socket {row['pull_old'] * 1000:.0f}), push {row['push'] * 1000:.0f} ms "
            f"(socket {row['push_old'] * 1000:.0f}) (small pull {row['small'] * 1000:.0f} ms)")
        rows.append(row)
    kernel.output("%workers stop data")

    def median(key):
        return statistics.median(r[key] for r in rows)

    def ratio(key, base):
        return statistics.median(r[key] / r[base] for r in rows)

    keys = ("copy", "copy_new", "raw", "pull", "push", "small", "pull_old", "push_old")
    return {"runs": rows, **{k: median(k) for k in keys},
            **{f"{k}_vs_{base}": ratio(k, base) for k in ("pull", "push", "pull_old", "push_old")
               for base in ("copy", "raw")}}


def rows(result: dict) -> list[tuple[str, str, str, str]]:
    def rate(seconds: float) -> str:
        return f"{MIB / seconds:.0f} MB/s"

    def verdict(seconds: float) -> str:
        return f">= {TARGET_MBS:g} MB/s: " + ("met" if MIB / seconds >= TARGET_MBS else "NOT met")

    return [
        (f"data: {MIB} MiB np.copyto in the kernel (data's baseline)", rate(result["copy"]), "baseline", ""),
        (f"data: {MIB} MiB np.copy (a new array) in the kernel", rate(result["copy_new"]),
         f"{result['copy_new'] / result['copy']:.2f}x copy time", ""),
        (f"data: {MIB} MiB over a raw ZMQ ipc socket, zero-copy", rate(result["raw"]),
         f"{result['raw'] / result['copy']:.2f}x copy time", ""),
        (f"data: session.pull of a {MIB} MiB float32 array, shared memory", rate(result["pull"]),
         f"{result['pull_vs_copy']:.1f}x copy, {result['pull_vs_raw']:.1f}x raw ZMQ", verdict(result["pull"])),
        ("data: session.pull of it, old socket path", rate(result["pull_old"]),
         f"{result['pull_old_vs_copy']:.1f}x copy, {result['pull_old_vs_raw']:.1f}x raw ZMQ", ""),
        (f"data: session.push of it, shared memory (+ a 1-int pull: {result['small'] * 1000:.0f} ms)",
         rate(result["push"]), f"{result['push_vs_copy']:.1f}x copy, {result['push_vs_raw']:.1f}x raw ZMQ",
         verdict(result["push"])),
        ("data: session.push of it, old socket path", rate(result["push_old"]),
         f"{result['push_old_vs_copy']:.1f}x copy, {result['push_old_vs_raw']:.1f}x raw ZMQ", ""),
    ]
