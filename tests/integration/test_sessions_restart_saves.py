"""Every restart path saves (issue 31, item 2): a worker of a session killed by hand (`kill -9`), and the second
Stop of a cell that does not stop, restart the processes only after the workers still alive saved what they hold;
the session's note says what was saved and what was lost, and re-running the cell that builds the model puts its
weights and optimizer back. Its own kernel and session (built and trained as in test_sessions.py); marked
`installed` like test_sessions_saved_state.py."""

from __future__ import annotations

import re

import pytest
from conftest import wait_until
from session_helpers import BUILD, TRAIN, cell_log, session_kernel_in

pytestmark = [pytest.mark.timeout(300), pytest.mark.installed]

SESSION = "nbworkers.session('train')"
REBUILD = BUILD.replace("%%worker -n 2 --session train --block", "%%worker --session train --block")
STUBBORN = """%%worker --session train
import time
stops = 0
print("LOOPING", flush=True)
while True:  # a cell the first Stop does not end
    try:
        time.sleep(0.05)
    except KeyboardInterrupt:
        stops += 1
        print("SWALLOWED", stops, flush=True)
        if stops >= 2:
            raise
"""
SAME_MODEL = ("all(np.array_equal(a, b) for a, b in zip({}.pull('model.get_weights()', worker={}), weights_before)) "
              "and {}.pull('int(model.optimizer.iterations.numpy())', worker={}) == iterations_before")


@pytest.fixture(scope="module")
def session_kernel(tmp_path_factory):
    with session_kernel_in(tmp_path_factory.mktemp("restart-saves")) as kernel:
        for code in (BUILD, TRAIN):
            result = kernel.run(code)
            assert not result.error and result.status == "ok", result.text
        yield kernel


def remember_model(k) -> None:
    ran = k.run(f"weights_before = {SESSION}.pull('model.get_weights()')\n"
                f"iterations_before = {SESSION}.pull('int(model.optimizer.iterations.numpy())')")
    assert not ran.error, ran.text


def restarted(k, count: int) -> bool:
    return k.value(f"{SESSION}.restarts") == count and bool(k.value(f"{SESSION}.lost_note"))


def rebuild_and_check(k) -> None:
    rebuilt = k.run(REBUILD)  # re-running cell 1 is all it takes: the saved model is read back as it ends
    assert not rebuilt.error, rebuilt.text
    for worker in (0, 1):
        assert k.value(SAME_MODEL.format(SESSION, worker, SESSION, worker)), worker


def kill_9(k, worker: int, restarts: int) -> str:
    """kill -9 of one worker; the session's note once its processes restarted."""
    pid = k.value(f"{SESSION}.snapshot()['workers'][{worker}]['pid']")
    assert not k.run(f"import os, signal\nos.kill({pid}, signal.SIGKILL)").error
    assert wait_until(lambda: restarted(k, restarts), 120, interval=0.5)
    note = k.value(f"{SESSION}.lost_note")
    print(note)
    return note


def test_kill_9_of_worker_1_worker_0_saves_before_the_restart(session_kernel):
    k = session_kernel
    remember_model(k)
    note = kill_9(k, 1, restarts=1)
    assert "worker 1 was killed by SIGKILL" in note
    assert "- kept: worker 0 saved model (Keras model: " in note and "step_size (variable" in note
    assert "- worker 1 was gone before the save (killed): its own arrays and values are lost" in note
    rebuild_and_check(k)


def test_the_second_stop_ends_the_cell_on_every_worker_and_saves_before_the_restart(session_kernel):
    k = session_kernel
    remember_model(k)
    assert not k.run(STUBBORN).error
    number = k.value(f"len({SESSION}.cells)")
    looping = "all(any('{}' in line for line in {}.cells[-1].snapshot()['workers'][w]['log_tail']) for w in (0, 1))"
    assert wait_until(lambda: k.value(looping.format("LOOPING", SESSION)), 60, interval=0.5)
    assert "interrupting" in k.run("%workers stop train --cell").stdout
    assert wait_until(lambda: k.value(looping.format("SWALLOWED 1", SESSION)), 60, interval=0.5)
    second = k.run("%workers stop train --cell")
    assert "restart" in second.stdout, second.text
    assert wait_until(lambda: restarted(k, 2), 120, interval=0.5)
    assert k.value(f"{SESSION}.cells[{number - 1}].state") == "stopped"
    error = k.value(f"{SESSION}.cells[{number - 1}].error")
    print(error)
    assert "Stop was pressed twice" in error  # the first worker to end the cell saved the model
    assert re.search(r"- kept: worker [01] saved model \(Keras model: ", error), error
    assert any("SWALLOWED 2" in line for line in cell_log(k, number, 0))
    rebuild_and_check(k)


def test_restart_saves_and_when_worker_0_is_killed_worker_1_saves_the_model(session_kernel):
    k = session_kernel
    remember_model(k)
    assert not k.run(f"{SESSION}.restart()").error  # the widget's and the sidebar's Restart do this
    assert wait_until(lambda: restarted(k, 3), 120, interval=0.5)
    assert "- kept: worker 0 saved model (Keras model: " in k.value(f"{SESSION}.lost_note")
    rebuild_and_check(k)
    note = kill_9(k, 0, restarts=4)
    assert "- kept: worker 1 saved model (Keras model: " in note
    assert "- worker 0 was gone before the save (killed)" in note
    rebuild_and_check(k)  # worker 1's checkpoint, read on both new workers
