"""Interactive sessions (``%%worker --session``) end to end: a real kernel, one real 2-worker TensorFlow session shared by the
checks of this module, in order (state across cells, --block failures, pull, Stop, hostile pull replies, kill -9 of
a worker). The kill -9 of the kernel has its own kernel. One worker's error in a collective, the session's restart and
the saved values coming back are in test_sessions_saved_state.py (run on the installed wheel)."""

from __future__ import annotations

import base64
import os
import re
import signal
import time

import pytest
from conftest import processes_of_run_root, wait_until
from session_helpers import BUILD, TRAIN, cell_log, session_kernel_in

pytestmark = pytest.mark.timeout(300)

EVALUATE = """%%worker --session train --block
checksum = float(sum(np.abs(w).astype("float64").sum() for w in model.get_weights()))
print("CHECKSUM", repr(checksum), "BUILT", built_in_cell)
"""
LONG_FIT = """%%worker --session train
history = distlib.fit(model, dataset, epochs=1000, steps_per_epoch=50, verbose=0)
"""
LONG_FIT_BLOCK = """%%worker --session train --block
marker = keras.callbacks.LambdaCallback(on_train_batch_end=lambda batch, logs: batch == 3 and print("STEPPING", flush=True))
history = distlib.fit(model, dataset, epochs=1000, steps_per_epoch=50, verbose=0, callbacks=[marker])
"""


@pytest.fixture(scope="module")
def session_kernel(tmp_path_factory):
    with session_kernel_in(tmp_path_factory.mktemp("sessions")) as kernel:
        yield kernel


def test_state_lives_across_three_cells_and_workers_stay_in_sync(session_kernel):
    k = session_kernel
    for code in (BUILD, TRAIN, EVALUATE):
        result = k.run(code)
        assert not result.error and result.status == "ok", result.text
    # the final summary of the blocking cell is in its output, with the session and the cell's [N] in it
    assert f"train cell [{result.execution_count}]: finished" in result.displays[-1]["text/plain"]
    assert any("TRAINED 2" in line for line in cell_log(k, 2, 0))
    sums = [[line for line in cell_log(k, 3, w) if line.startswith("CHECKSUM")] for w in (0, 1)]
    assert len(sums[0]) == 1 and sums[0] == sums[1], sums  # different data per worker: all-reduced gradients
    assert sums[0][0].endswith("BUILT 1")  # a variable of cell 1, still there in cell 3
    # each cell got only its own output
    assert not any("CHECKSUM" in line for line in cell_log(k, 2, 0))
    # identical weights on both workers, pulled back as numpy arrays
    same = k.value("all(np.array_equal(a, b) for a, b in zip(nbworkers.session('train').pull('model.get_weights()', "
                   "worker=0), nbworkers.session('train').pull('model.get_weights()', worker=1)))")
    assert same is True
    # the cell's live widget carries the session line (session, cell number, state, what it ran)
    line = k.value("nbworkers.session('train').cells[2]._views[0].widget.session")
    assert (line["name"], line["cell"], line["state"]) == ("train", f"[{result.execution_count}]", "finished")
    assert "checksum" in line["running"]
    listing = k.run("%workers")
    assert "session: 3 cells, idle" in listing.displays[-1]["text/plain"]
    assert k.value("'tensorflow' in __import__('sys').modules") is False


def test_flags_a_session_cannot_take_are_refused_before_anything_starts(session_kernel):
    k = session_kernel
    for flags, words in (("--chief", "not available with --session"), ("--ps 1", "not available with --session"),
                         ("--name different", "leave --name out")):
        result = k.run(f"%%worker -n 2 --session other {flags}\nx = 1")
        assert words in result.failure, (flags, result.text)
    assert k.value("'other' in [c.name for c in nbworkers.clusters()]") is False
    plain = k.run("%%worker -n 2 --display all\nx = 1")  # rich output is a session's: a plain run refuses it
    assert "only for session cells" in plain.failure, plain.text


def test_pull_arrays_nested_dicts_and_a_history(session_kernel):
    k = session_kernel
    history = k.value("nbworkers.session('train').pull('history')")
    assert set(history) == {"loss", "accuracy"} and len(history["loss"]) == 2
    k.run("nested = nbworkers.session('train').pull(\"{'x': x[:4], 'n': [1, 2.5, None, 'a'], 'deep': {'t': "
          "tf.constant([[1, 2], [3, 4]]), 'nan': float('nan')}, 'scalar': np.float32(0.5)}\", worker=1)")
    assert k.value("(type(nested['x']).__name__, nested['x'].shape, str(nested['x'].dtype))") == ("ndarray", (4, 8), "float32")
    assert k.value("(nested['deep']['t'].tolist(), nested['n'], nested['scalar'])") == ([[1, 2], [3, 4]], [1, 2.5, None, "a"], 0.5)
    assert k.value("nested['deep']['nan'] != nested['deep']['nan']") is True
    # a large array comes back in several chunks
    assert k.value("float(nbworkers.session('train').pull('np.arange(600_000, dtype=\"float64\")').sum())") == sum(range(600_000))
    # what cannot travel, and a value past the limit: clear errors, the session goes on
    refused = k.run("nbworkers.session('train').pull('model')")
    assert "PullError" in refused.error and "cannot be pulled" in refused.error and "model.save" in refused.error
    limited = k.run("nbworkers.settings().pull_max_bytes = 1000\n"
                    "try:\n    nbworkers.session('train').pull('np.zeros(1000)')\n"
                    "finally:\n    nbworkers.settings().pull_max_bytes = 256 * 2**20")
    assert "PullError" in limited.error and "pull_max_bytes" in limited.error
    raised = k.run("nbworkers.session('train').pull('undefined_name')")
    assert "NameError" in raised.error


def test_a_failed_cell_raises_and_the_session_goes_on(session_kernel):
    k = session_kernel
    failed = k.run("%%worker --session train --block\nraise KeyError('on every worker')")
    assert failed.status == "error" and "RunFailed" in failed.error, failed.text
    assert "KeyError" in failed.error and "<session cell" in failed.error  # the worker's own traceback
    # no process restarted: the message says the state is safe and the one thing to run, before the traceback
    assert "- nothing was lost: no process restarted" in failed.error, failed.error
    # the cell is named as the notebook shows it, by its [N] (issue 43)
    assert f"- run: cell [{failed.execution_count}] again once it is fixed" in failed.error, failed.error
    assert failed.error.index("- run: cell [") < failed.error.index("Traceback"), failed.error
    again = k.run("%%worker --session train --block\nprint('STILL', built_in_cell)")
    assert not again.error, again.text
    # the cell it ran, not a fixed number: make soak runs a part of the module's tests, in another order
    assert "STILL 1" in cell_log(k, k.value("len(nbworkers.session('train').cells)"), 1)


def test_stop_interrupts_a_long_fit_and_the_next_cell_runs_in_the_same_state(session_kernel):
    k = session_kernel
    started = k.run(LONG_FIT)
    assert not started.error, started.text
    assert wait_until(lambda: k.value("(nbworkers.session('train').cells[-1].snapshot()['workers'][1]['step'] or 0)") > 0,
                      120, interval=0.5)
    stopped = k.run("%workers stop train --cell")
    assert "interrupting" in stopped.stdout, stopped.text
    k.run("nbworkers.session('train').cells[-1].wait(120, raise_on_failure=False)")
    assert k.value("nbworkers.session('train').cells[-1].state") == "stopped"
    assert k.value("nbworkers.session('train').cells[-1].error").startswith("stopped by you at step ")
    after = k.run("%%worker --session train --block\nprint('STEPS', int(model.optimizer.iterations.numpy()), built_in_cell)")
    assert not after.error, after.text
    number = k.value("len(nbworkers.session('train').cells)")  # (make soak runs this module's tests in its order)
    lines = [line for w in (0, 1) for line in cell_log(k, number, w) if line.startswith("STEPS")]
    assert len(lines) == 2 and lines[0] == lines[1], lines  # same step on both workers: they stopped together
    assert int(lines[0].split()[1]) > 16 and lines[0].endswith(" 1")  # trained further, same model, same state
    assert k.value("nbworkers.session('train').restarts") == 0


def test_the_notebooks_interrupt_stops_a_blocking_cell_on_both_workers_and_keeps_the_state(session_kernel):
    """■ (interrupt_kernel) while a --block session cell trains: the cell is stopped on every worker at the same
    step, the notebook cell ends as interrupted with a one-line stop note, and the next cell sees the model."""
    k = session_kernel
    steps_before = k.value("int(nbworkers.session('train').pull('int(model.optimizer.iterations.numpy())'))")
    msg_id = k.send(LONG_FIT_BLOCK)
    seen = ""
    deadline = time.monotonic() + 120
    worker_1_log = k.run_root / "train" / "worker-1.log"  # the echo shows worker 1's lines only where they differ

    def both_training() -> bool:
        return "[0] STEPPING" in seen and "STEPPING" in worker_1_log.read_text(errors="replace")

    while not both_training():  # both workers are training
        assert time.monotonic() < deadline, f"the workers did not start training:\n{seen}"
        try:
            msg = k.client.get_iopub_msg(timeout=1)
        except Exception:
            continue
        if msg["parent_header"].get("msg_id") == msg_id and msg["msg_type"] == "stream":
            seen += msg["content"]["text"]
    interrupted_at = time.monotonic()
    k.manager.interrupt_kernel()
    result = k.collect(msg_id, timeout=60)
    took = time.monotonic() - interrupted_at
    print(f"notebook interrupt -> session cell ended: {took:.2f} s")  # the measurement (-s shows it)
    assert result.status == "error" and result.error_line.startswith("CellStopped: "), result.text
    assert "stopped by you at step " in result.error_line and "state live on" in result.error_line, result.error
    shown = seen + result.text
    for frame in ("callback_list.py", "reporting.py", "distlib/worker/session.py", "Traceback"):
        assert frame not in shown, shown  # a stop, not a crash: no nbworkers frames in the cell
    cell = "nbworkers.session('train').cells[-1]"
    assert k.value(f"{cell}.state") == "stopped"
    assert k.value(f"[w['status'] for w in {cell}.snapshot()['workers']]") == ["stopped", "stopped"]
    after = k.run("%%worker --session train --block\nprint('STEPS', int(model.optimizer.iterations.numpy()), "
                  "built_in_cell)")
    assert not after.error, after.text
    number = k.value("len(nbworkers.session('train').cells)")
    lines = [line for w in (0, 1) for line in cell_log(k, number, w) if line.startswith("STEPS")]
    assert len(lines) == 2 and lines[0] == lines[1], lines  # stopped at the same step on both workers
    assert int(lines[0].split()[1]) > steps_before and lines[0].endswith(" 1")  # same model, trained further
    assert k.value("nbworkers.session('train').restarts") == 0


CUSTOM_LOOP = """%%worker --session train
task_id = int(os.environ["NBWORKERS_WORKER"])
with strategy.scope():
    loop_opt = keras.optimizers.SGD(0.01)
    loop_opt.build(model.trainable_variables)
loop_iterator = iter(strategy.experimental_distribute_dataset(dataset))

@tf.function
def loop_step(iterator):
    def replica(batch):
        x, y = batch
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(y, model(x), from_logits=True))
        loop_opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        return loss
    return strategy.reduce("SUM", strategy.run(replica, args=(next(iterator),)), axis=None)

loop_steps = 0
for i in range(100000):  # no report(): every call of loop_step is where a Stop pauses the workers
    loss = loop_step(loop_iterator)
    loop_steps += 1
    if loop_steps == 3:
        print("LOOPING", flush=True)
    sum(range(20000))  # a little Python work between steps, as real loops have
"""
LOOP_STATE = "(task_id, loop_steps, int(loop_opt.iterations.numpy()))"


def stop_a_custom_loop_without_report(k, name: str = "train") -> list[tuple[int, int, int]]:
    """Run CUSTOM_LOOP, press Stop once both workers stepped, and return each worker's (task_id, loop_steps,
    iterations) afterwards; the cell must read stopped, with no restart of the processes."""
    restarts = k.value(f"nbworkers.session({name!r}).restarts")
    started = k.run(CUSTOM_LOOP)
    assert not started.error, started.text
    cell, number = f"nbworkers.session({name!r}).cells[-1]", k.value(f"len(nbworkers.session({name!r}).cells)")
    assert wait_until(lambda: all("LOOPING" in cell_log(k, number, w) for w in (0, 1)), 120, interval=0.5)
    stopped = k.run(f"%workers stop {name} --cell")
    assert "interrupting" in stopped.stdout, stopped.text
    k.run(f"{cell}.wait(120, raise_on_failure=False)")
    assert k.value(f"{cell}.state") == "stopped", k.value(f"{cell}.error")
    assert k.value(f"nbworkers.session({name!r}).restarts") == restarts, k.value(f"{cell}.error")
    return [tuple(k.value(f"nbworkers.session({name!r}).pull({LOOP_STATE!r}, worker={w})")) for w in (0, 1)]


def test_stop_of_a_custom_loop_that_never_reports_stops_both_workers_at_the_same_step(session_kernel):
    """■ on a custom loop with no report(): each call of its distributed step is a step point, so both workers stop
    after the same number of steps, every value kept on both (task_id), no restart (the processes live on)."""
    k = session_kernel
    for _ in range(3):  # three times in a row (make soak runs it beside busy processes)
        (t0, steps0, it0), (t1, steps1, it1) = stop_a_custom_loop_without_report(k)
        assert (t0, t1) == (0, 1) and steps0 == steps1 > 0 and it0 == it1 == steps0, (steps0, steps1, it0, it1)


TRAIN_THEN_WAIT = """%%worker --session train
for _ in range(3):
    loop_step(loop_iterator)
print("WAITING", flush=True)
time.sleep(300)  # Python work after the training: no worker is inside a step
"""


def test_stop_of_python_work_after_the_steps_is_a_plain_interrupt_with_the_state_kept(session_kernel):
    """No worker is inside a step when Stop comes (the cell trained, then works in Python): a plain KeyboardInterrupt
    ends it on both, at once, and the processes live on (waiting for a step that never comes would restart them)."""
    k = session_kernel
    restarts = k.value("nbworkers.session('train').restarts")
    assert not k.run("%%worker --session train --block\nimport time").error
    assert not k.run(TRAIN_THEN_WAIT).error
    number = k.value("len(nbworkers.session('train').cells)")
    assert wait_until(lambda: all("WAITING" in cell_log(k, number, w) for w in (0, 1)), 120, interval=0.5)
    assert "interrupting" in k.run("%workers stop train --cell").stdout
    k.run("nbworkers.session('train').cells[-1].wait(120, raise_on_failure=False)")
    cell = "nbworkers.session('train').cells[-1]"
    assert k.value(f"{cell}.state") == "stopped", k.value(f"{cell}.error")
    assert k.value("nbworkers.session('train').restarts") == restarts, k.value(f"{cell}.error")
    assert [k.value(f"nbworkers.session('train').pull('task_id', worker={w})") for w in (0, 1)] == [0, 1]


HOSTILE = """
import io, pickle, threading, time
import zmq
from nbworkers.protocol import session_data, wire
from nbworkers.magics.sessions.pull import PullError
session = nbworkers.session("train")
MARK = {mark!r}

class Evil:
    def __reduce__(self):
        import pathlib
        return (pathlib.Path.touch, (pathlib.Path(MARK),))

def pull_with_forged_reply(send):
    out = {{}}
    def run():
        try:
            out["value"] = session.pull("__import__('time').sleep(3) or 'genuine'", worker=0)
        except PullError as error:
            out["error"] = str(error)
    thread = threading.Thread(target=run)
    thread.start()
    while not session.pending_pulls:
        time.sleep(0.01)
    request = next(iter(session.pending_pulls))
    socket = zmq.Context.instance().socket(zmq.PUSH)
    socket.connect(session.data_channel.address)
    fields = {{"request": request, "worker": 0, "gen": session.state.generation, "error": None}}
    socket.send_multipart(send(wire.Signer(session._part.key), fields))
    thread.join(60)
    socket.close(linger=0)
    return out

def npy_header(array):
    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(buffer, np.lib.format.header_data_from_array_1_0(array))
    return buffer.getvalue()

def pickled(signer, fields):  # a pickle where an array's .npy header should be
    return session_data.pack(session._part.key, signer, "pull", {{**fields, "value": {{"__nbw__": "array", "blob": 0}}}},
                             [pickle.dumps(Evil()), b""])

def pickle_tag(signer, fields):  # a pickle, honestly labelled: the kernel never loads one
    return session_data.pack(session._part.key, signer, "pull", {{**fields, "value": {{"__nbw__": "pickle", "blob": 0}}}},
                             [pickle.dumps(Evil())])

def object_array(signer, fields):
    array = np.array([Evil()], dtype=object)
    return session_data.pack(session._part.key, signer, "pull", {{**fields, "value": {{"__nbw__": "array", "blob": 0}}}},
                             [npy_header(array), pickle.dumps(Evil())])

def tampered(signer, fields):  # the payload changed after signing: its MAC no longer matches
    frames = session_data.pack(session._part.key, signer, "pull", {{**fields, "value": {{"__nbw__": "array", "blob": 0}}}},
                               [npy_header(np.zeros(4)), bytes(32)])
    return frames[:-1] + [b"x" * 32]

def wrong_key(signer, fields):  # not signed with the session's key: dropped and counted
    other = wire.new_key()
    return session_data.pack(other, wire.Signer(other), "pull", {{**fields, "value": "forged"}}, [])

def other_request(signer, fields):  # well signed, for no pending request: dropped and counted
    return session_data.pack(session._part.key, signer, "pull", {{**fields, "request": "0" * 32, "value": "stale"}}, [])

results = {{name: pull_with_forged_reply(fn) for name, fn in [
    ("pickle", pickled), ("pickle_tag", pickle_tag), ("object", object_array),
    ("tampered", tampered), ("wrong_key", wrong_key), ("other_request", other_request)]}}
"""


def test_hostile_pull_replies_are_refused_without_executing_anything(session_kernel, tmp_path):
    k = session_kernel
    mark = tmp_path / "pwned"
    drops_before = k.value("nbworkers.session('train').snapshot()['dropped']")
    result = k.run(HOSTILE.format(mark=str(mark)))
    assert not result.error, result.text
    results = k.value("results")
    assert "pickles are never loaded" in results["pickle"]["error"]
    assert "pickles are never loaded" in results["pickle_tag"]["error"]
    assert "bad .npy data" in results["object"]["error"]
    for name in ("tampered", "wrong_key", "other_request"):  # dropped and counted; the genuine reply arrives
        assert results[name] == {"value": "genuine"}, name
    assert not mark.exists()  # the pickle's payload never ran
    drops = k.value("nbworkers.session('train').snapshot()['dropped']")
    assert drops["data"] >= drops_before["data"] + 3
    assert k.value("nbworkers.session('train').pull('1 + 1')") == 2  # the session goes on


PUSH_PULL = """
session = nbworkers.session("train")
big = np.random.default_rng(0).random(16 * 2**20, dtype=np.float32)  # 64 MiB
session.push(big=big, config={"lr": 0.01, "layers": [16, 2], "name": "run"})
back = session.pull("big", worker=1)
config_back = session.pull("config", worker=0)
"""


def test_push_a_64_mib_array_and_pull_it_back_equal(session_kernel):
    k = session_kernel
    result = k.run(PUSH_PULL)
    assert not result.error, result.text
    assert k.value("bool(np.array_equal(back, big)) and back.dtype == np.float32 and back.shape == big.shape")
    assert k.value("config_back") == {"lr": 0.01, "layers": [16, 2], "name": "run"}
    # the workers' cells see the pushed values
    cell = k.run("%%worker --session train --block\nprint('PUSHED', big.dtype, big.shape, float(big[:10].sum()))")
    assert not cell.error, cell.text
    expected = k.value("float(big[:10].sum())")
    count = k.value("len(nbworkers.session('train').cells)")
    for worker in (0, 1):
        assert f"PUSHED float32 (16777216,) {expected!r}" in "".join(cell_log(k, count, worker))


def test_scatter_gives_each_worker_its_shard(session_kernel):
    k = session_kernel
    rows = k.value("nbworkers.session('train').scatter('shard', np.arange(10 * 3).reshape(10, 3))")
    assert [list(r) for r in rows] == [[0, 5], [5, 10]]
    assert k.value("nbworkers.session('train').pull('shard.tolist()', worker=0)") == [
        [3 * i, 3 * i + 1, 3 * i + 2] for i in range(5)]
    assert k.value("nbworkers.session('train').pull('shard[:, 0].tolist()', worker=1)") == [15, 18, 21, 24, 27]


def test_push_of_an_object_needs_allow_pickle(session_kernel):
    k = session_kernel
    refused = k.run("import fractions\nnbworkers.session('train').push(half=fractions.Fraction(1, 2))")
    assert "PushError" in refused.error and "allow_pickle=True" in refused.error
    assert not k.run("nbworkers.session('train').push(half=fractions.Fraction(1, 2), allow_pickle=True)").error
    assert k.value("nbworkers.session('train').pull('str(half * 4)')") == "2"


BOARD_BUILD = BUILD.replace("%%worker -n 2 --session train --block", "%%worker --session train --block") + """
import time
board_t0 = time.time()  # the event files of earlier processes of this session are older
"""
BOARD_FIT = """%%worker --session train --block
history = distlib.fit(model, dataset, epochs=2, steps_per_epoch=4, verbose=0, callbacks=[distlib.TensorBoard()])
"""
READ_BOARD = """%%worker --session train --block
import glob
def summary_steps(folder, tag):
    found = []
    for path in glob.glob(os.path.join(distlib.tensorboard_dir(), folder, "*tfevents*")):
        for event in tf.compat.v1.train.summary_iterator(path):
            found += [(event.wall_time, event.step) for v in event.summary.value
                      if v.tag == tag and event.wall_time >= board_t0]
    return [step for _, step in sorted(found)]
board_steps = {"epochs": summary_steps("train", "epoch_loss"), "reports": summary_steps("report", "loss"),
               "iterations": int(model.optimizer.iterations.numpy())}
"""


def test_two_fit_cells_write_one_tensorboard_timeline(session_kernel):
    k = session_kernel
    built = k.run(BOARD_BUILD)  # a model of its own
    assert not built.error, built.text
    for _ in range(2):
        fitted = k.run(BOARD_FIT)
        assert not fitted.error, fitted.text
    read = k.run(READ_BOARD)
    assert not read.error, read.text
    steps = k.value("nbworkers.session('train').pull('board_steps', worker=0)")
    assert steps["epochs"] == [0, 1, 2, 3]  # the second fit's epochs follow the first's, in one run folder
    reports = steps["reports"]  # at the optimizer's iterations: increasing across both fits, up to the last
    assert len(reports) >= 4 and reports == sorted(set(reports)) and reports[-1] == steps["iterations"]
    assert reports[-1] - reports[0] >= 4  # the second fit's 8 steps continue after the first's


def test_kill_9_of_a_worker_restarts_the_group_and_says_what_was_lost(session_kernel):
    k = session_kernel
    kept = k.run("%%worker --session train --block\nkept = 'before the kill'")
    last = k.value("len(nbworkers.session('train').cells)")
    pid = k.value("nbworkers.session('train').snapshot()['workers'][1]['pid']")
    restarts = k.value("nbworkers.session('train').restarts")
    os.kill(pid, signal.SIGKILL)
    assert wait_until(lambda: k.value("nbworkers.session('train').restarts") > restarts, 60, interval=0.5)
    note = k.value("nbworkers.session('train').lost_note")
    # the cells are named by the notebook's numbers, the last one this cell's [N] (issue 43)
    assert re.search(rf"state of cells? [\[\]\d, and-]*\[{kept.execution_count}\] is gone", note), note
    after = k.run("%%worker --session train --block\nprint('KEPT', 'kept' in globals())")
    assert not after.error, after.text
    assert "KEPT False" in cell_log(k, last + 1, 1)
    stop = k.run("%workers stop train")
    assert not stop.error
    assert k.value("nbworkers.session('train').status") == "stopped"
    assert wait_until(lambda: not processes_of_run_root(k.run_root), 20)


RICH = """%%worker -n 2 --session rich --block
import base64
import os
import matplotlib.pyplot as plt
from IPython.display import HTML
plt.plot([1, 2, 3])
plt.show()
display(HTML("<b>bold from a worker</b>"))
print("SAME ON EVERY WORKER")
print("WORKER", os.environ["NBWORKERS_WORKER"])
import keras
keras.Sequential([keras.Input((3,)), keras.layers.Dense(2, name="only_layer")], name="small").summary()
{"answer": 42}
"""


def test_a_session_cell_shows_plots_html_its_value_and_each_line_once(session_kernel):
    """plt.show() and display(HTML) on the workers reach the cell as image/png and text/html (worker 0's only);
    the last expression is the cell's Out; a line every worker prints is shown once, nbworkers' markers never."""
    k = session_kernel
    result = k.run(RICH, timeout=240)
    assert result.status == "ok", result.text
    pngs = [d for d in result.displays if "image/png" in d]
    htmls = [d for d in result.displays if "text/html" in d and "bold from a worker" in d["text/html"]]
    assert len(pngs) == 1 and base64.b64decode(pngs[0]["image/png"]).startswith(b"\x89PNG"), result.displays
    assert len(htmls) == 1, result.displays
    assert result.msg_types.count("execute_result") == 1, result.msg_types
    assert result.displays[-1]["text/plain"] == "{'answer': 42}", result.displays[-1]
    shown = result.stdout
    assert shown.count("SAME ON EVERY WORKER") == 1, shown
    assert shown.count("only_layer") == 1 and shown.count("Total params") == 1, shown  # model.summary() once
    assert "[0] WORKER 0" in shown and "[1] WORKER 1" in shown, shown  # lines that differ: both
    for noise in ("--- nbworkers:", "cuInit", "absl::InitializeLog"):
        assert noise not in shown, shown


def test_a_session_cells_value_shows_every_worker_where_they_differ_and_display_all(session_kernel):
    k = session_kernel
    value = k.run("%%worker --session rich --block\nint(os.environ['NBWORKERS_WORKER']) * 10")
    assert value.status == "ok", value.text
    assert value.displays[-1]["text/plain"] == "[0] 0\n[1] 10", value.displays
    both = k.run("%%worker --session rich --block --display all\nplt.plot([3, 2, 1])\nplt.show()\nx = 1")
    assert both.status == "ok", both.text
    assert len([d for d in both.displays if "image/png" in d]) == 2, both.displays
    assert "execute_result" not in both.msg_types  # an assignment has no Out


FORGED_DISPLAYS = """%%worker --session rich --block
from nbworkers.protocol import wire
sender = wire.process_sender()
for data in ({{"application/x-python-pickle": "gASVAAAAAAAAAAB9lC4="}}, {{"image/png": "%%% not base64"}},
             {{"text/html": "x" * (5 * 2**20)}}, {{"text/plain": "an old cell's"}}):
    sender.send("display", cell={cell} if "old" not in str(data) else 1, source="display", data=data, metadata={{}})
display({{"text/plain": "the genuine one"}}, raw=True)
"""


def test_rich_outputs_that_are_not_what_they_claim_are_dropped_and_counted(session_kernel):
    """A pickle's MIME type, bad base64, more than display_max_bytes, a bundle for another cell: none is shown,
    each is counted; the genuine output of the same cell still is."""
    k = session_kernel
    before = k.value("nbworkers.session('rich').snapshot()['dropped']")
    number = k.value("len(nbworkers.session('rich').cells)") + 1
    result = k.run(FORGED_DISPLAYS.format(cell=number))
    assert result.status == "ok", result.text
    assert [d for d in result.displays if "nbworkers cluster" not in d.get("text/plain", "")] \
        == [{"text/plain": "the genuine one"}], result.displays
    drops = k.value("nbworkers.session('rich').snapshot()['dropped']")
    assert drops["malformed"] - before["malformed"] == 2 * 2, (before, drops)  # on each of the 2 workers
    assert drops["oversized"] - before["oversized"] == 2 and drops["stale"] - before["stale"] == 2, (before, drops)


def test_a_failed_session_cell_shows_its_traceback_once(session_kernel):
    k = session_kernel
    failed = k.run("%%worker --session rich --block\nraise KeyError('on every worker')")
    assert failed.status == "error", failed.text
    rendered = failed.error[len(failed.error_line):]  # what the notebook shows of the error: its traceback list
    shown = failed.stdout + failed.stderr + rendered + failed.shown
    assert shown.count("Traceback") == 1 and shown.count("raise KeyError('on every worker')") == 1, shown
    stop = k.run("%workers stop rich")
    assert not stop.error, stop.text


def test_kill_9_of_the_kernel_leaves_no_session_process(kernel, run_root):
    result = kernel.run("%%worker -n 2 --session quick --block\nimport time\nvalue = 1")
    assert not result.error, result.text
    started = kernel.run("%%worker --session quick\ntime.sleep(600)")
    assert not started.error
    assert wait_until(lambda: len(processes_of_run_root(run_root)) >= 4, 30)  # 2 hosts + 2 workers
    os.kill(kernel.pid, signal.SIGKILL)
    assert wait_until(lambda: not processes_of_run_root(run_root), 30), processes_of_run_root(run_root)
