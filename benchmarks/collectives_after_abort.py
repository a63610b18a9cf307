"""An experiment, not a benchmark: what a process can still do after ``abort_collective_ops`` under
MultiWorkerMirroredStrategy (``python benchmarks/collectives_after_abort.py``; findings in ``notes.md``).

Two real worker processes (``TF_CONFIG`` on two local ports) build the strategy and all-reduce once (works). Then
worker 0 enters an all-reduce that worker 1 does not join; after 2 s worker 0 aborts its collectives (as a session
does for a cell stuck in a collective: ``distlib/compat/eager_context.abort_collectives``) and worker 1 aborts its
own too. Both then try, in order: a local op, the coordination service's key-value store, an all-reduce through
reading a variable made in the strategy's scope before the abort and writing it with ``tf.train.Checkpoint``,
the same strategy, and an all-reduce in a new ``tf.function``. Each prints one JSON line of outcomes.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

WORKER = r"""
import json, os, sys, threading, time
import tensorflow as tf
from nbworkers.distlib.compat import eager_context

index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
strategy = tf.distribute.MultiWorkerMirroredStrategy()
with strategy.scope():
    kept = tf.Variable([1.0, 2.0])  # made before the abort: is it still readable and savable?
outcomes = {"tensorflow": tf.__version__, "worker": index}

def all_reduce(value):
    return strategy.reduce("SUM", strategy.run(lambda: tf.constant(value)), axis=None).numpy().item()

def attempt(name, fn):
    try:
        outcomes[name] = ["ok", fn()]
    except Exception as error:
        outcomes[name] = ["error", f"{type(error).__name__}: {str(error).splitlines()[0][:200]}"]

attempt("before: all-reduce", lambda: all_reduce(1.0))
if index == 0:  # stuck: worker 1 never joins this one
    threading.Timer(2.0, lambda: eager_context.abort_collectives("experiment", "no abort")).start()
    attempt("stuck all-reduce, aborted after 2 s", lambda: all_reduce(2.0))
else:
    time.sleep(4.0)
    eager_context.abort_collectives("experiment", "no abort")
time.sleep(2.0)
attempt("after: local op", lambda: float(tf.reduce_sum(tf.ones(3)).numpy()))
attempt("after: coordination key-value store", lambda: (eager_context.store_put(f"k{index}", "v"),
                                                         eager_context.store_get(f"k{1 - index}", 20_000))[1])
attempt("after: read a variable made in the strategy's scope", lambda: kept.numpy().tolist())
attempt("after: tf.train.Checkpoint.write of it (local file)",
        lambda: bool(tf.train.Checkpoint(v=kept).write(os.path.join(os.environ["OUT"], f"ckpt-{index}/c"))))
attempt("after: all-reduce, same strategy", lambda: all_reduce(3.0))

@tf.function
def fresh():
    return strategy.run(lambda: tf.constant(4.0))

attempt("after: all-reduce, new tf.function", lambda: strategy.reduce("SUM", fresh(), axis=None).numpy().item())
print("OUTCOMES " + json.dumps(outcomes), flush=True)
os._exit(0)
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> int:
    ports = [_free_port(), _free_port()]
    cluster = {"worker": [f"127.0.0.1:{p}" for p in ports]}
    procs = []
    out_dir = tempfile.mkdtemp(prefix="nbworkers-abort-")
    for index in range(2):
        env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "OUT": out_dir,
               "TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}})}
        procs.append(subprocess.Popen([sys.executable, "-c", WORKER], env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.DEVNULL, text=True, start_new_session=True))
    outputs = ["", ""]

    def read(i: int) -> None:
        outputs[i] = procs[i].communicate()[0]

    threads = [threading.Thread(target=read, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 300
    for thread in threads:
        thread.join(max(1.0, deadline - time.monotonic()))
    for proc in procs:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
            proc.wait()
    for i, out in enumerate(outputs):
        lines = [line for line in out.splitlines() if line.startswith("OUTCOMES ")]
        print(json.dumps(json.loads(lines[-1][9:]), indent=1) if lines else f"worker {i}: no outcome (timed out)")
    shutil.rmtree(out_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
