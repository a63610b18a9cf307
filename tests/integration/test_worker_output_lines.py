"""A worker's lines reach its host whole (distlib/worker/bootstrap.py ``whole_lines``): the interpreter runs with
``-u``, and a thread writing to stderr (TensorFlow's preemption watcher printing a traceback when its peer left) cut
``print("CHECKSUM", x)`` in two, so a finished run's last line was nowhere whole. A real interpreter with ``-u`` and
both streams on one pipe, as under a worker host."""

from __future__ import annotations

import subprocess
import sys

RACE = """
import sys, threading
from nbworkers.distlib.worker.bootstrap import whole_lines
whole_lines()
done = threading.Event()

def chatter():
    while not done.is_set():
        print("Exception in thread Watcher", "Traceback (most recent call last):", file=sys.stderr)

thread = threading.Thread(target=chatter)
thread.start()
for i in range(3000):
    print("CHECKSUM", i, "of", "the", "cell")
done.set()
thread.join()
"""


def test_a_line_printed_in_parts_is_never_cut_by_another_threads_output():
    ran = subprocess.run([sys.executable, "-u", "-c", RACE], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         timeout=120)
    assert ran.returncode == 0, ran.stdout[-2000:]
    lines = ran.stdout.decode().splitlines()
    ours = [line for line in lines if "CHECKSUM" in line]
    assert len(ours) == 3000 and all(line == f"CHECKSUM {i} of the cell" for i, line in enumerate(ours)), [
        line for line in ours if not line.endswith(" of the cell")][:5]
    assert all(line == "Exception in thread Watcher Traceback (most recent call last):" for line in lines
               if "CHECKSUM" not in line)
