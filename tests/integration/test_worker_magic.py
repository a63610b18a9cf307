"""%%worker end to end: a real kernel (jupyter_client) launching real worker processes."""

from __future__ import annotations

import json
import os
import re
import signal
import time

import pytest
from cells import CHECKSUM, FIT, KERAS_TRAINING, SLEEP, worker_cell
from conftest import processes_of_run_root, wait_until

# The TensorFlow tutorial's Keras code, unchanged, on tf_keras (Keras 2): MWMS syncs the two workers.
TRAIN_CELL = worker_cell("-n 2 --block --name train --env TF_USE_LEGACY_KERAS=1", KERAS_TRAINING, FIT,
                         'print("LOSS", history.history["loss"])\n', CHECKSUM)
SLEEP_CELL = worker_cell("-n 2 --name {name}", SLEEP)
pytestmark = pytest.mark.share_kernel  # one kernel for these tests (tests/shared_kernel.py)


def checksums(log_text: str) -> list[str]:
    return re.findall(r"CHECKSUM (\S+)", log_text)


def test_two_workers_train_in_sync_and_kernel_stays_tensorflow_free(kernel, run_root):
    result = kernel.run(TRAIN_CELL)
    assert not result.error, result.error
    assert kernel.value("nbworkers.get_cluster('train').status") == "finished", result.text
    logs = [(run_root / "train" / f"worker-{i}.log").read_text() for i in range(2)]
    sums = [checksums(text) for text in logs]
    assert all(len(s) == 1 for s in sums), logs
    assert sums[0] == sums[1], f"workers ended with different weights: {sums}"
    # each worker trained on its own data, so identical weights prove the gradients were all-reduced
    tf_config = [re.search(r"TF_CONFIG=(\{.*\})", text).group(1) for text in logs]
    assert '"index": 0' in tf_config[0] and '"index": 1' in tf_config[1]
    # the live view ended with a final summary in the same output
    assert "finished" in result.displays[-1]["text/plain"]
    shown = kernel.run("%workers logs train -w 1 --tail 5")
    assert "CHECKSUM" in shown.stdout
    assert kernel.value("'tensorflow' in __import__('sys').modules") is False


def test_a_keras_progress_bar_reads_in_the_logs_as_in_a_cell(kernel, run_root):
    """Keras 3's default progress bar (verbose=1: escape codes, backspaces, carriage returns): ``%workers logs``
    and the blocking cell's echo show one plain line per finished bar (protocol/terminal.py)."""
    ran = kernel.run(worker_cell("-n 2 --block --name bars", KERAS_TRAINING,
                                 "model.fit(dataset, epochs=2, steps_per_epoch=4)\n"))
    assert not ran.error, ran.error
    raw = (run_root / "bars" / "worker-0.log").read_bytes().decode()
    assert "\x1b[" in raw and "\r" in raw, raw  # what Keras wrote: the file keeps every byte
    shown = kernel.run("%workers logs bars").stdout
    for text in (shown, ran.stdout):
        assert not any(code in text for code in ("\x1b", "\b", "\r", "[37", "[0m")), repr(text)
    for index in range(2):
        bars = [line.split()[1] for line in shown.splitlines() if line.startswith(f"[{index}] ") and "/4 " in line]
        assert bars == ["4/4", "4/4"], shown  # one finished bar per epoch, no update before it


def test_cell_returns_at_once_and_workers_wait_sees_the_end(kernel, tmp_path):
    gate = tmp_path / "gate"
    cell = f"""%%worker -n 2 --name gated
import os, time
while not os.path.exists({str(gate)!r}):
    time.sleep(0.05)
print("through the gate")
"""
    launched = kernel.run(cell)
    assert not launched.error, launched.error
    # the cell came back while the workers are still held at the gate: it did not wait for them
    assert kernel.value("nbworkers.get_cluster('gated').status") in ("starting", "running")
    assert kernel.value("nbworkers.get_cluster('gated').done") is False
    gate.write_text("open")
    waited = kernel.run("%workers wait gated --timeout 120")
    assert not waited.error, waited.error
    assert kernel.value("nbworkers.get_cluster('gated').status") == "finished"
    assert "through the gate" in kernel.run("%workers logs gated").stdout
    listing = kernel.run("%workers")
    assert "gated" in listing.displays[-1]["text/plain"]


def test_a_nan_loss_is_shown_not_dropped(kernel, run_root):
    cell = """%%worker -n 2 --block --name diverged
from nbworkers import distlib
distlib.report(loss=float("nan"), accuracy=0.5, step=1, flush=True)
"""
    ran = kernel.run(cell)
    assert not ran.error, ran.error
    metrics = kernel.value("{k: str(v) for k, v in nbworkers.get_cluster('diverged').snapshot()['workers'][0]['metrics'].items()}")
    assert metrics == {"loss": "nan", "accuracy": "0.5"}
    state = json.loads((run_root / "diverged" / "state.json").read_text(), parse_constant=lambda c: pytest.fail(f"{c} in state.json"))
    assert state["workers"][0]["metrics"]["loss"] == "nan"  # strict JSON for the REST API


def test_worker_that_raises_fails_the_cluster_and_stops_the_others(kernel, run_root):
    cell = """%%worker -n 2 --name crash
import os, time
if os.environ["NBWORKERS_WORKER"] == "1":
    time.sleep(0.5)
    raise ValueError("bad batch shape from worker one")
time.sleep(600)  # worker 0 would wait forever in a collective
"""
    assert not kernel.run(cell).error
    waited = kernel.run("%workers wait crash --timeout 60")
    assert waited.status == "error" and waited.error.startswith("RunFailed: run 'crash' failed"), waited.error
    # the worker's own frames, at the cell's line (the %%worker line is line 1), and no kernel-side frames
    assert 'cell.py", line 5, in <module>' in waited.error, waited.error
    assert "magic.py" not in waited.error and "cluster.py" not in waited.error, waited.error
    rendered = waited.error.split("\x1b[0;31mRunFailed", 1)[1]  # what the notebook shows (after ename: evalue)
    assert rendered.count("Traceback (most recent call last)") == 1, waited.error
    snap = kernel.value("nbworkers.get_cluster('crash').snapshot()")
    assert snap["status"] == "failed"
    # the error is one short line (the REST API serves it); the traceback is in the worker's log tail
    assert snap["error"] == "worker 1 exited with code 1: ValueError: bad batch shape from worker one."
    assert snap["workers"][1]["status"] == "failed" and snap["workers"][1]["exit_code"] == 1
    assert snap["workers"][0]["status"] == "stopped"
    assert not processes_of_run_root(run_root)
    assert kernel.run("%workers wait crash --no-raise").status == "ok"
    assert kernel.value("isinstance(nbworkers.RunFailed(''), RuntimeError)") is True


@pytest.mark.own_kernel  # it kills its kernel
def test_killing_the_kernel_takes_its_workers_along(kernel, run_root):
    assert not kernel.run(SLEEP_CELL.format(name="orphans")).error
    assert wait_until(lambda: len(processes_of_run_root(run_root)) >= 4, 60), "hosts and workers did not start"
    os.kill(kernel.pid, signal.SIGKILL)
    time.sleep(5)
    assert not processes_of_run_root(run_root), "workers outlived a kill -9 of their kernel by 5 s"


def test_interrupt_button_does_not_kill_workers(kernel, run_root):
    assert not kernel.run(SLEEP_CELL.format(name="interrupted")).error
    assert wait_until(lambda: "worker up" in kernel.run("%workers logs interrupted").stdout, 60)
    msg_id = kernel.client.execute("import time; time.sleep(30)")
    time.sleep(1)
    kernel.manager.interrupt_kernel()
    reply = kernel.client.get_shell_msg(timeout=30)
    assert reply["parent_header"]["msg_id"] == msg_id
    assert reply["content"]["status"] == "error" and reply["content"]["ename"] == "KeyboardInterrupt"
    assert kernel.value("nbworkers.get_cluster('interrupted').status") == "running"
    assert len(processes_of_run_root(run_root)) == 4
    stopped = kernel.run("%workers stop interrupted")
    assert not stopped.error
    assert kernel.value("nbworkers.get_cluster('interrupted').status") == "stopped"
    assert not processes_of_run_root(run_root)


def test_forged_unsigned_and_malformed_messages_are_dropped_and_counted(kernel, run_root):
    assert not kernel.run(SLEEP_CELL.format(name="forged")).error
    address = kernel.value("nbworkers.get_cluster('forged').relay.address")
    key = kernel.value("nbworkers.get_cluster('forged')._loop.key")
    from nbworkers.protocol.wire import Sender

    forger = Sender(address, "00" * 32, worker=0)  # the wrong key
    forger.send("status", state="failed", detail="forged")
    forger.send("exit", code=3)
    honest = Sender(address, key, worker=0)
    honest.send("status", state="no-such-state")  # signed, but not in the schema
    honest.send("metrics", metrics={"loss": "not a number"})
    import pickle

    import zmq

    raw = zmq.Context.instance().socket(zmq.PUSH)
    raw.connect(address)
    raw.send_multipart([b"<IDS|MSG>", b"", pickle.dumps({"evil": True}), b"{}", b"{}", b"{}"])  # unsigned
    honest.send("metrics", metrics={"loss": 0.5}, step=1)  # one good message, last
    assert wait_until(
        lambda: kernel.value("nbworkers.get_cluster('forged').snapshot()['workers'][0]['metrics']") == {"loss": 0.5}, 20
    )
    kernel.run("import time; time.sleep(0.5)")
    dropped = kernel.value("nbworkers.get_cluster('forged').snapshot()['dropped']")
    assert dropped["bad_signature"] == 3 and dropped["malformed"] == 2, dropped
    snap = kernel.value("nbworkers.get_cluster('forged').snapshot()")
    assert snap["status"] == "running" and snap["workers"][0]["status"] != "failed"
    for sender in (forger, honest):
        sender.close(0)
    raw.close(0)
    assert not kernel.run("%workers stop forged").error


@pytest.mark.parametrize(
    "line, expected",
    [
        ("-n 0", "at least 1 worker"),
        ("-n abc", "invalid int value"),
        ("--no-such-flag", "unrecognized arguments"),
        ("--python /no/such/python", "no such executable"),
        ("--env NOEQUALS", "expected KEY=VALUE"),
        ("--cwd /no/such/dir", "no such directory"),
        ("--push undefined_variable", "no variable named undefined_variable"),
        ("--name ../escape", "use letters, digits"),
        ("--timeout -1", "finite number of seconds"),
        ("--gpus-per-worker 64", "needs 128 GPUs"),
        ("--max-restarts -1", "use 0 (never restart) or more"),
    ],
)
def test_bad_flags_give_a_clear_error_and_start_nothing(kernel, run_root, line, expected):
    before = set(run_root.iterdir())  # the shared kernel's earlier runs
    result = kernel.run(f"%%worker {line}\nprint('hi')\n")
    assert result.status == "error" and expected in result.failure, result
    assert set(run_root.iterdir()) == before
    assert not processes_of_run_root(run_root)


def test_a_worker_python_with_another_nbworkers_version_is_refused_with_the_command_that_fixes_it(kernel, run_root,
                                                                                                  tmp_path):
    """Its worker would never say that its cell ran to its end (nor speak this version's messages): refused first."""
    old = tmp_path / "python-with-nbworkers-0.0.1"
    old.write_text("#!/bin/sh\necho 0.0.1\n")  # answers the check as an interpreter with nbworkers 0.0.1 would
    old.chmod(0o755)
    before = set(run_root.iterdir())
    result = kernel.run(f"%%worker --python {old}\nprint('hi')\n")
    assert result.status == "error" and "has nbworkers 0.0.1, this kernel " in result.failure, result
    assert f"`{old} -m pip install --no-deps nbworkers==" in result.failure, result.failure
    assert set(run_root.iterdir()) == before


def test_syntax_error_is_shown_once_with_its_line_and_nothing_starts(kernel, run_root):
    before = set(run_root.iterdir())
    result = kernel.run("%%worker -n 2\nx = 1\nif x ==:\n    pass\n")
    assert result.status == "error"
    assert result.failure.count("SyntaxError in the %%worker cell at line 3") == 1, result.failure
    assert "if x ==:" in result.failure
    assert set(run_root.iterdir()) == before


def test_help_prints_real_usage(kernel):
    result = kernel.run("%%worker --help\nprint('not run')\n")
    assert result.status == "ok"
    shown = result.stdout
    alone = kernel.run("%%worker --help")  # alone on the line, an empty cell: IPython's "cell body is empty" before
    assert alone.status == "ok" and "usage: %%worker" in alone.stdout, alone.failure
    assert "usage: %%worker" in shown
    for flag in ("--workers", "--python", "--env", "--cwd", "--gpus-per-worker", "--block", "--timeout", "--push"):
        assert flag in shown, shown
    assert "usage: %workers" in kernel.run("%workers --help").stdout


def test_push_writefile_modules_and_cwd(kernel):
    setup = kernel.run(
        "%%writefile helper_mod.py\nGREETING = 'hello from a module written by %%writefile'\n"
    )
    assert not setup.error, setup.error
    assert not kernel.run("config = {'lr': 0.25, 'layers': [4, 2]}").error
    cell = """%%worker -n 2 --block --name pushed --push config --env EXTRA=yes
import os, helper_mod
print(helper_mod.GREETING, config["lr"], config["layers"], os.environ["EXTRA"], __name__, os.getcwd())
"""
    result = kernel.run(cell)
    assert not result.error, result.error
    logs = kernel.run("%workers logs pushed").stdout
    for i in (0, 1):
        assert f"[{i}] hello from a module written by %%writefile 0.25 [4, 2] yes __main__ {kernel.notebook_dir}" in logs


def test_unpicklable_push_is_refused(kernel, run_root):
    before = set(run_root.iterdir())
    assert not kernel.run("import threading; lock = threading.Lock()").error
    result = kernel.run("%%worker --push lock\nprint(1)\n")
    assert "cannot be pickled" in result.failure
    assert set(run_root.iterdir()) == before


@pytest.mark.own_kernel  # it patches the local backend in its kernel
def test_port_collision_relaunches_on_fresh_ports(kernel, run_root):
    """A TensorFlow server that loses the race for its port: the group restarts on fresh ports. (Isolation off: in
    a run's private network namespace a port another program holds on the machine is free, so no race is lost.)"""
    occupy = """
import socket
from nbworkers.magics.backends import local as _local
from nbworkers.magics.launch import ports as _ports
nbworkers.settings().isolation = "off"
_held = socket.socket(); _held.bind(("0.0.0.0", 0)); _held.listen(1)
_real_pick = _ports.pick_free_ports
_calls = []
def _pick_taken_first(count, bind_host="0.0.0.0"):
    _calls.append(count)
    chosen = _real_pick(count, bind_host)
    if len(_calls) == 1:
        chosen[1] = _held.getsockname()[1]   # worker 1 gets a port someone else holds
    return chosen
_local.pick_free_ports = _pick_taken_first  # the name the local backend plans with
"""
    assert not kernel.run(occupy).error
    cell = """%%worker -n 2 --block --name collide --env TF_USE_LEGACY_KERAS=1
import tensorflow as tf
strategy = tf.distribute.MultiWorkerMirroredStrategy()
print("replicas", strategy.num_replicas_in_sync)
"""
    result = kernel.run(cell)
    assert not result.error, result.error
    snap = kernel.value("nbworkers.get_cluster('collide').snapshot()")
    assert snap["status"] == "finished", snap["error"]
    assert snap["restarts"] == 1 and "could not bind its port" in snap["restart_causes"][0]
    assert "replicas 2" in kernel.run("%workers logs collide -w 1").stdout
    kernel.run("_local.pick_free_ports = _real_pick; _held.close(); nbworkers.settings().isolation = 'auto'")
