"""Interactive sessions (``%%worker --session``) on ``--backend ray``: one real 2-worker TensorFlow session on the Ray
cluster of this folder (conftest.py), shared by the checks of this module, in order (state across cells, pull, Stop,
the CurveZMQ command socket, kill -9 of a worker, then of the kernel: no actor or process is left)."""

from __future__ import annotations

import os
import re
import signal
import sys

import psutil
import pytest
from conftest import Kernel, kill_leftovers, processes_of_run_root, wait_until
from integration.test_sessions import BUILD as LOCAL_BUILD
from integration.test_sessions import LONG_FIT as LOCAL_LONG_FIT
from ray_helpers import ACTORS_GONE_TIMEOUT, RAY_TEST_ENV, WORKERS_UP_TIMEOUT

pytestmark = [pytest.mark.ray, pytest.mark.timeout(600)]

# the local session tests' cells, started on Ray here
BUILD = LOCAL_BUILD.replace("--session train", "--session rs --backend ray --address {address}")
LONG_FIT = LOCAL_LONG_FIT.replace("--session train", "--session rs")
TRAIN = """%%worker --session rs --block
history = distlib.fit(model, dataset, epochs=2, steps_per_epoch=4, verbose=0)
print("TRAINED", len(history.history["loss"]), "BUILT", built_in_cell)
"""
STRANGER = """
import time, zmq
from nbworkers.protocol import wire
from nbworkers.protocol.relay_curve import client_keypair
session = nbworkers.session("rs")
channel = session.channel
peers, refused = dict(channel._peers), channel.curve.keys.refused
strangers = []
for curve in [(channel.curve.public_key, *client_keypair()), None]:  # a key nobody allowed; no CurveZMQ at all
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    if curve:
        sock.curve_serverkey, sock.curve_publickey, sock.curve_secretkey = (k.encode() for k in curve)
    sock.connect(channel.address)
    # signed with the run's HMAC key (readable in Ray's traffic): only CurveZMQ keeps it out
    sock.send_multipart(wire.Signer(session._part.key).frames("ready", {"worker": 0, "gen": session.state.generation}))
    strangers.append(sock)
time.sleep(3)
answered = [bool(s.poll(1000)) for s in strangers]
# the data socket (pull replies): the same strangers, and a key allowed as worker 1 forging worker 0's reply
from nbworkers.protocol import session_data, session_values
data = session.data_channel
data_refused, data_forged = data.curve.keys.refused, data.forged
tree, blobs = session_values.encode("forged")
forged = session_data.pack(session._part.key, wire.Signer(session._part.key), "pull",
                           {"request": "forged", "worker": 0, "gen": session.state.generation, "value": tree}, blobs)
other_node = client_keypair()
data.curve.allow(other_node[0], 1)
for curve in [(channel.curve.public_key, *client_keypair()), None, (channel.curve.public_key, *other_node)]:
    sock = zmq.Context.instance().socket(zmq.PUSH)
    sock.setsockopt(zmq.LINGER, 0)
    if curve:
        sock.curve_serverkey, sock.curve_publickey, sock.curve_secretkey = (k.encode() for k in curve)
    sock.connect(data.address)
    sock.send_multipart(forged)
    strangers.append(sock)
time.sleep(2)
pulled = session.pull("built_in_cell", worker=0)  # reads the forged reply first: dropped, counted
facts = {"endpoint": channel._socket.getsockopt(zmq.LAST_ENDPOINT).decode(), "address": channel.address,
         "relay_address": session.relay.address, "same_keys": channel.curve.keys is session.relay.curve.keys,
         "same_server_key": channel.curve.public_key == session.relay.server_public_key,
         "peers_kept": dict(channel._peers) == peers, "newly_refused": channel.curve.keys.refused - refused,
         "answered": answered, "data_bound": data._socket.getsockopt(zmq.LAST_ENDPOINT).decode() == data.address,
         "data_newly_refused": data.curve.keys.refused - data_refused, "data_forged": data.forged - data_forged,
         "pulled": pulled}
for s in strangers:
    s.close()
"""


@pytest.fixture(scope="module")
def ray_kernel(tmp_path_factory, ray_cluster_once):
    base = tmp_path_factory.mktemp("ray-sessions")
    (base / "runs").mkdir()
    (base / "notebook").mkdir()
    env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
    env.update(RAY_TEST_ENV, NBWORKERS_RUN_ROOT=str(base / "runs"), TF_CPP_MIN_LOG_LEVEL="2",
               NBWORKERS_ZYGOTE="0")
    command = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    kernel = Kernel(base / "notebook", env, kernel_cmd=command)
    kernel.run_root = base / "runs"
    loaded = kernel.run("%load_ext nbworkers\nimport nbworkers\nimport numpy as np")
    assert not loaded.error, loaded.error
    yield kernel
    kernel.shutdown()
    assert wait_until(lambda: not processes_of_run_root(kernel.run_root), 30), "session processes outlived the kernel"
    kill_leftovers(kernel.run_root)


def cell_log(kernel, number: int, worker: int) -> list[str]:
    return kernel.value(f"nbworkers.session('rs').cells[{number - 1}].snapshot()['workers'][{worker}]['log_tail']")


def test_state_lives_across_cells_on_ray_workers(ray_kernel, ray_cluster):
    k = ray_kernel
    built = k.run(BUILD.format(address=ray_cluster.address), timeout=WORKERS_UP_TIMEOUT + 120)
    assert not built.error and built.status == "ok", built.text
    trained = k.run(TRAIN)
    assert not trained.error and trained.status == "ok", trained.text
    assert k.value("nbworkers.session('rs').snapshot()['backend']") == "ray"
    nodes = k.value("[p['node_id'] for p in nbworkers.session('rs').backend.placements]")
    assert len(set(nodes)) == 2, "one CPU per node: the two workers run on the two Ray nodes"
    for worker in (0, 1):  # the model and the variable of cell 1 were there in cell 2, on each Ray worker
        assert any(line.startswith("TRAINED 2 BUILT 1") for line in cell_log(k, 2, worker)), cell_log(k, 2, worker)
    assert k.value("'tensorflow' in __import__('sys').modules") is False


def test_pull_an_array_and_a_dict_over_the_relay(ray_kernel):
    k = ray_kernel
    k.run("s = nbworkers.session('rs')\nrows = s.pull('x[:4]', worker=1)\n"
          "mixed = s.pull(\"{'history': history.history, 'kernel': model.get_weights()[0], 'n': [1, None, 'a']}\")")
    assert k.value("(type(rows).__name__, rows.shape, str(rows.dtype))") == ("ndarray", (4, 8), "float32")
    assert k.value("(len(mixed['history']['loss']), mixed['kernel'].shape, mixed['n'])") == (2, (8, 16), [1, None, "a"])
    # all-reduced training: the same weights on both Ray workers
    assert k.value("all(np.array_equal(a, b) for a, b in zip(s.pull('model.get_weights()', worker=0), "
                   "s.pull('model.get_weights()', worker=1)))") is True


def test_stop_interrupts_a_long_fit_and_the_next_cell_runs(ray_kernel):
    k = ray_kernel
    assert not k.run(LONG_FIT).error
    assert wait_until(lambda: (k.value("nbworkers.session('rs').cells[-1].snapshot()['workers'][1]['step']") or 0) > 0,
                      120, interval=0.5)
    stopped = k.run("%workers stop rs --cell")
    assert "interrupting" in stopped.stdout, stopped.text
    k.run("nbworkers.session('rs').cells[-1].wait(120, raise_on_failure=False)")
    assert k.value("nbworkers.session('rs').cells[-1].state") == "stopped"
    after = k.run("%%worker --session rs --block\n"
                  "print('STEPS', int(model.optimizer.iterations.numpy()), built_in_cell)")
    assert not after.error, after.text
    lines = [line for w in (0, 1) for line in cell_log(k, 4, w) if line.startswith("STEPS")]
    assert len(lines) == 2 and lines[0] == lines[1], lines  # both workers stopped at the same step
    assert int(lines[0].split()[1]) > 8 and lines[0].endswith(" 1")  # trained further, same model
    assert k.value("nbworkers.session('rs').restarts") == 0


def test_the_command_and_data_sockets_on_ray_refuse_strangers_and_other_workers_keys(ray_kernel):
    k = ray_kernel
    ran = k.run(STRANGER)
    assert not ran.error, ran.text
    facts = k.value("facts")
    # bound where the relay is (the kernel node's address the nodes are told, not every interface), its keys
    assert facts["endpoint"] == facts["address"] and not facts["endpoint"].startswith("tcp://0.0.0.0:"), facts
    assert facts["address"].rsplit(":", 1)[0] == facts["relay_address"].rsplit(":", 1)[0], facts
    assert facts["same_keys"] and facts["same_server_key"], facts
    # the stranger's key went through the allow-list and was refused; neither stranger was taken for worker 0
    assert facts["newly_refused"] >= 1 and facts["peers_kept"] and facts["answered"] == [False, False], facts
    assert k.value("nbworkers.session('rs').pull('built_in_cell')") == 1  # the session still answers
    # the data socket: bound there too; strangers refused; worker 1's key cannot answer worker 0's pull
    assert facts["data_bound"] and facts["data_newly_refused"] >= 1, facts
    assert facts["data_forged"] == 1 and facts["pulled"] == 1, facts


def test_kill_9_of_a_ray_worker_restarts_the_group(ray_kernel):
    k = ray_kernel
    pid = k.value("nbworkers.session('rs').snapshot()['workers'][1]['pid']")
    assert pid and psutil.pid_exists(pid)
    os.kill(pid, signal.SIGKILL)
    assert wait_until(lambda: k.value("nbworkers.session('rs').restarts") == 1, 120, interval=1)
    # the four cells before it, named by the notebook's numbers (issue 43): more than three read as a range
    assert re.search(r"state of cells \[\d+\]-\[\d+\] is gone", k.value("nbworkers.session('rs').lost_note"))
    after = k.run("%%worker --session rs --block\nprint('KEPT', 'model' in globals())", timeout=WORKERS_UP_TIMEOUT + 60)
    assert not after.error, after.text
    assert "KEPT False" in cell_log(k, 5, 0)


def test_kill_9_of_the_kernel_leaves_no_actor_or_process(ray_kernel, ray_cluster):
    k = ray_kernel
    assert not k.run("%%worker --session rs\nimport time\ntime.sleep(600)").error
    assert wait_until(lambda: k.value("nbworkers.session('rs').busy"), 30)
    assert len(ray_cluster.actor_processes()) == 2
    os.kill(k.pid, signal.SIGKILL)  # the Ray driver that owns the actors
    assert wait_until(lambda: not ray_cluster.actor_processes(), ACTORS_GONE_TIMEOUT), ray_cluster.actor_processes()
    assert wait_until(lambda: not processes_of_run_root(k.run_root), 30), processes_of_run_root(k.run_root)
