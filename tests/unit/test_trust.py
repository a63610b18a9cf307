"""Trustworthy output, the parts that need no process: RunFailed's message, the bounded echo of worker output, the
TensorFlow chatter filter, honest numbers and words (steps/s over epochs, exits, restarts), the REST fields."""

from __future__ import annotations

import io

import pytest

from nbworkers.magics.errors import RunFailed
from nbworkers.magics.launch.environment import cpp_log_level, worker_env
from nbworkers.magics.notebook.help_cell import help_only_cell
from nbworkers.magics.notebook.zygotes_listing import zygotes_text_html
from nbworkers.magics.run.core.state import ClusterState, WorkerState
from nbworkers.magics.run.failed import ERROR_BELOW_KEY, failure_message, mark_error_below, run_failure
from nbworkers.magics.run.noise import NoiseFilter, is_noise
from nbworkers.magics.rundir.rest_fields import shape
from nbworkers.magics.views import summary
from nbworkers.magics.views.echo import WorkerEcho

TRACEBACK = ["Traceback (most recent call last):", '  File "/runs/x/cell.py", line 7, in <module>',
             '    raise ValueError("bad")', "ValueError: bad"]


def snap(status="failed", workers=None, error="worker 1 exited with code 1: ValueError: bad."):
    return {"name": "x", "status": status, "error": error, "workers": workers or []}


def worker(index, status, tail=(), code=None, role="worker"):
    return {"index": index, "role": role, "status": status, "log_tail": list(tail), "exit_code": code,
            "log_path": f"/runs/x/worker-{index}.log"}


# ------------------------------------------------------------------------------------------- RunFailed


def test_run_failure_names_the_run_the_worker_and_its_own_frames():
    failure = run_failure(snap(workers=[worker(0, "stopped", ["hello"]), worker(1, "failed", ["hi", *TRACEBACK], 1)]))
    assert isinstance(failure, RunFailed) and failure.name == "x" and failure.workers == (1,)
    text = str(failure)
    assert text.splitlines()[0] == "run 'x' failed: worker 1 exited with code 1: ValueError: bad."
    assert '"/runs/x/cell.py", line 7' in text and text.count("Traceback") == 1 and "hi" not in text
    assert "/runs/x/worker-1.log" in text and "%workers logs x -w 1" in text
    rendered = failure._render_traceback_()  # what IPython shows: the message, no kernel-side frames
    assert "RunFailed" in rendered[0] and rendered[1:] == text.splitlines()[1:]


def test_the_same_traceback_on_every_worker_is_shown_once():
    text = failure_message(snap(workers=[worker(0, "failed", TRACEBACK, 1), worker(1, "failed", TRACEBACK, 1)]))
    assert text.count("Traceback (most recent call last)") == 1
    assert "worker 0, worker 1 (the same traceback)" in text


def test_a_long_traceback_keeps_its_first_line_and_last_frames():
    frames = [f'  File "lib.py", line {i}, in f' for i in range(200)]
    text = failure_message(snap(workers=[worker(1, "failed", [TRACEBACK[0], *frames, "RuntimeError: deep"], 1)]))
    assert "Traceback (most recent call last)" in text and "RuntimeError: deep" in text and "lines cut" in text
    assert len(text.splitlines()) < 40


def test_finished_and_stopped_runs_do_not_raise_and_a_wait_timeout_does():
    assert run_failure(snap("finished", error="")) is None
    assert run_failure(snap("stopped", error="")) is None  # stopped by the user is not a failure
    timeout = run_failure(snap("running", error=""), ended=False, waited=5)
    assert timeout.status == "timeout" and "still running after 5 s" in str(timeout)
    crashed = run_failure(snap(workers=[worker(1, "failed", ["Killed"], -9)], error="worker 1 was killed by SIGKILL."))
    assert "no Python traceback in the log (exit code -9)" in str(crashed)


def test_the_summary_above_a_raised_failure_leaves_the_traceback_to_it():
    state = ClusterState(name="x", run_dir="/runs/x", workers=[WorkerState(index=0), WorkerState(index=1)])
    state.status, state.error = "failed", "worker 1 exited with code 1: ValueError: bad."
    state.workers[1].status, state.workers[1].exit_code = "failed", 1
    state.workers[1].log_tail.feed([line + "\n" for line in TRACEBACK])
    plain = state.snapshot()
    assert "Traceback" in summary.render_text(plain) and "Traceback" in summary.render_summary_html(plain)
    marked = mark_error_below(plain)
    assert marked[ERROR_BELOW_KEY] and ERROR_BELOW_KEY not in plain
    for text in (summary.render_text(marked), summary.render_summary_html(marked)):
        assert "Traceback" not in text and "error below" in text and "ValueError: bad" in text


# ------------------------------------------------------------------------------------------ echo


def tail_snapshot(lines_by_worker, status="running", opens=()):
    workers = []
    for index, lines in enumerate(lines_by_worker):
        w = WorkerState(index=index, log_path=f"/runs/x/worker-{index}.log", status=status)
        w.log_tail.feed([line + ("" if (index in opens and i == len(lines) - 1) else "\n") for i, line in enumerate(lines)])
        workers.append(w.snapshot())
    return {"workers": workers}


def test_echo_writes_each_workers_new_lines_prefixed_once():
    out = io.StringIO()
    echo = WorkerEcho(max_lines=100, tail_lines=5, out=out)
    echo.tick(tail_snapshot([["a0", "b0"], ["a1"]]))
    echo.tick(tail_snapshot([["a0", "b0"], ["a1"]]))  # nothing new: nothing written
    echo.finish(tail_snapshot([["a0", "b0", "c0"], ["a1", "partial"]], opens=(1,)))
    assert out.getvalue().splitlines() == ["[0] a0", "[0] b0", "[1] a1", "[0] c0", "[1] partial"]


def test_echo_is_bounded_and_says_what_it_cut():
    out = io.StringIO()
    echo = WorkerEcho(max_lines=10, tail_lines=3, out=out)
    w = WorkerState(index=0, log_path="/runs/x/worker-0.log")
    for start in range(0, 1000, 100):  # 100 lines between two ticks
        w.log_tail.feed([f"line {i}\n" for i in range(start, start + 100)])
        echo.tick({"workers": [w.snapshot()]})
    echo.finish({"workers": [w.snapshot()]})
    shown = out.getvalue().splitlines()
    assert shown[:10] == [f"[0] line {i}" for i in range(10)]
    assert len(shown) == 10 + 1 + 3
    assert shown[10].startswith("[0] ... 990 lines not shown here, its last 3 below") and "worker-0.log" in shown[10]
    assert shown[-3:] == ["[0] line 997", "[0] line 998", "[0] line 999"]


def test_echo_counts_lines_that_left_the_tail_between_ticks():
    out = io.StringIO()
    echo = WorkerEcho(max_lines=10_000, tail_lines=3, out=out)
    w = WorkerState(index=0)  # the kernel keeps 300 lines: a tick that comes late has missed some
    w.log_tail.feed([f"l{i}\n" for i in range(1000)])
    echo.finish({"workers": [w.snapshot()]})
    assert "700 lines went by too fast to show" in out.getvalue()


def test_echo_leaves_a_failed_workers_traceback_to_the_error():
    out = io.StringIO()
    echo = WorkerEcho(max_lines=100, tail_lines=5, out=out)
    echo.tick(tail_snapshot([["hello", *TRACEBACK]]))
    echo.finish(tail_snapshot([["hello", *TRACEBACK]], status="failed"))
    text = out.getvalue()
    assert "[0] hello" in text and "Traceback" not in text and "not repeated here" in text
    out2 = io.StringIO()
    echo = WorkerEcho(max_lines=100, tail_lines=5, out=out2)  # a worker that finished well shows what it printed
    echo.finish(tail_snapshot([["hello", *TRACEBACK, "went on"]], status="finished"))
    assert "[0] Traceback (most recent call last):" in out2.getvalue() and "[0] went on" in out2.getvalue()


# ------------------------------------------------------------------------------- TensorFlow's chatter

CHATTER = [
    "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n",
    "I0000 00:00:1795425037.109955   12655 port.cc:153] oneDNN custom operations are on.\n",
    "I0000 00:00:1795425037.110247   12655 cudart_stub.cc:31] Could not find cuda drivers on your machine.\n",
    "E0000 00:00:1795425039.857075   12655 cuda_platform.cc:52] failed call to cuInit: INTERNAL: CUDA error\n",
    "W1123 09:10:11.123456   13079 op_kernel.cc:1857] a warning\n",
]


def test_chatter_is_dropped_at_the_default_level_and_kept_when_the_user_asks():
    filt = NoiseFilter(2)
    kept = filt.filter(["".join(CHATTER) + "hello\nE0000 00:00:1.5   1 collective.cc:3] real error\n"])
    assert kept == ["hello\nE0000 00:00:1.5   1 collective.cc:3] real error\n"] and filt.dropped == 5
    assert NoiseFilter(0).filter(CHATTER) == CHATTER
    assert is_noise(CHATTER[1], 1) and not is_noise(CHATTER[4], 1)
    split = NoiseFilter(2)  # a line cut across chunks is never half-dropped
    assert "".join(split.filter(["partial I0000 00:00:1.5   1 port.cc:1] x\n"])) == "partial I0000 00:00:1.5   1 port.cc:1] x\n"


def test_workers_default_to_level_2_and_the_users_setting_wins():
    env = worker_env({"PATH": "/bin"}, {}, {"TF_CONFIG": "{}"}, "-1", {})
    assert env["TF_CPP_MIN_LOG_LEVEL"] == "2"
    assert worker_env({"TF_CPP_MIN_LOG_LEVEL": "0"}, {}, {"TF_CONFIG": "{}"}, "-1", {})["TF_CPP_MIN_LOG_LEVEL"] == "0"
    assert worker_env({"TF_CPP_MIN_LOG_LEVEL": "0"}, {"TF_CPP_MIN_LOG_LEVEL": "1"}, {"TF_CONFIG": "{}"}, "-1", {})["TF_CPP_MIN_LOG_LEVEL"] == "1"
    assert cpp_log_level({}, {}) == "2" and cpp_log_level({"TF_CPP_MIN_LOG_LEVEL": "0"}, {}) == "0"


# ------------------------------------------------------------------------------ honest numbers and words


def test_steps_per_sec_uses_the_global_step_across_epochs():
    """Reports as ReportCallback sends them (1-based, throttled to 0.25 s, the epoch's end forced): 12 steps
    per epoch at 20 steps/s, so every epoch lasts 0.6 s, less than the 1 s the rate is measured over."""
    w = WorkerState(index=0)
    rate, steps_total, last_sent = 20.0, 12, -1.0
    seen = []
    for global_step in range(1, 12 * 8 + 1):
        epoch, step = (global_step - 1) // steps_total + 1, (global_step - 1) % steps_total + 1
        t = 1000.0 + global_step / rate
        if step == steps_total or t - last_sent >= 0.25:
            last_sent = t
            w.apply_metrics({"t": t, "epoch": epoch, "step": step, "steps_total": steps_total, "epochs_total": 8,
                             "metrics": {"loss": 1.0}})
            if w.steps_per_sec is not None:
                seen.append(w.steps_per_sec)
    assert seen, "no rate was ever measured"
    for measured in seen:
        assert abs(measured - rate) / rate < 0.10, seen


def test_exits_and_restarts_in_words():
    assert summary.exit_text({"status": "stopped", "exit_code": -15}) == ""
    assert summary.exit_text({"status": "failed", "exit_code": -9}) == "killed by SIGKILL"
    assert summary.exit_text({"status": "failed", "exit_code": 1}) == "exit code 1"
    assert summary.headline({"name": "x", "status": "stopped", "workers": []}).startswith("nbworkers cluster x: stopped by you")
    assert "from scratch" in summary.resume_text({"epoch": 1, "step": 1})
    assert summary.resume_text({"epoch": 3, "step": 1}) == "resumed from a checkpoint at epoch 3, step 1"
    assert "not resumed yet" in summary.resume_text(None)
    lines = summary.restart_lines({"restart_history": [{"kind": "WorkerCrashed", "cause": "worker 1 was killed",
                                                        "resumed_from": {"epoch": 2, "step": 1}}]})
    assert lines == ["WorkerCrashed: worker 1 was killed; resumed from a checkpoint at epoch 2, step 1"]


def test_help_alone_in_a_cell_gets_a_body():
    assert help_only_cell(["%%worker --help"]) == ["%%worker --help\n", "pass\n"]
    assert help_only_cell(["%%worker -n 2 -h\n", "\n"]) == ["%%worker -n 2 -h\n", "pass\n"]
    assert help_only_cell(["%%worker -n 2\n", "x = 1\n"]) == ["%%worker -n 2\n", "x = 1\n"]
    assert help_only_cell(["%%worker --helpful\n"]) == ["%%worker --helpful\n"]


def test_zygotes_line_shows_their_memory_and_forks():
    text, html = zygotes_text_html([{"pid": 31, "forks": 4, "age": 60.0, "memory_mb": 543.2}])
    assert "zygotes" in text and "1, 543 MB" in text and "pid 31 543 MB, 4 workers forked" in text
    assert html.startswith("<p>zygotes") and "cell&#x27;s" in html  # escaped
    assert zygotes_text_html([]) == ("", "")


def test_rest_fields_have_iso_times_and_short_errors():
    data = shape({"clusters": [{"started": 0.0, "ended": None, "error": "worker 1 exited\nTraceback ...\n"}]})
    row = data["clusters"][0]
    assert row["started_iso"] == "1970-01-01T00:00:00.000Z" and "ended_iso" not in row
    assert row["error"].startswith("worker 1 exited") and "Traceback" not in row["error"]


@pytest.mark.parametrize("bad", [None, "", 3])
def test_short_error_passes_non_text_through(bad):
    assert shape({"error": bad})["error"] == bad


def test_saved_notebooks_drop_widget_views_of_runs_that_are_over():
    from nbworkers.saved_notebook import WIDGET_VIEW, drop_stateless_run_widgets, run_is_live, run_is_over

    def output(html, plain, model):
        return {"output_type": "display_data",
                "data": {"text/plain": plain, "text/html": html, WIDGET_VIEW: {"model_id": model}}}

    outputs = [
        output('<div class="nbw-summary">', "nbworkers cluster done: finished", "m1"),  # over: summary only
        output('<div class="nbw-fallback">', "nbworkers cluster gone: running", "m2"),  # its kernel is gone
        output('<div class="nbw-fallback">', "nbworkers cluster live: running", "m3"),  # still going: kept
        output("<div>another library</div>", "IntSlider()", "m4"),  # not ours: kept
        output('<div class="nbw-summary">', "nbworkers cluster saved: finished", "m5"),  # its state is saved: kept
        output('<div class="nbw-summary">', "nbworkers cluster again: finished", "m6"),  # restarted, live: kept
    ]
    notebook = {"cells": [{"cell_type": "code", "outputs": outputs}],
                "metadata": {"widgets": {"application/vnd.jupyter.widget-state+json": {"state": {"m5": {}}}}}}
    assert drop_stateless_run_widgets(notebook, over=lambda name: name == "gone", live=lambda name: name == "again") == 2
    assert [WIDGET_VIEW in o["data"] for o in outputs] == [False, False, True, True, True, True]
    assert all("text/html" in o["data"] for o in outputs)
    assert run_is_over("no-such-run-anywhere") is False and run_is_live("no-such-run-anywhere") is False


def test_a_final_summary_keeps_the_workers_last_lines_unless_a_wait_wrote_them():
    from nbworkers.magics.views.summary import ECHOED_KEY

    state = ClusterState(name="x", run_dir="/runs/x", workers=[WorkerState(index=0), WorkerState(index=1)])
    state.status = "finished"
    for w in state.workers:
        w.status = "finished"
        w.log_tail.feed([f"printed {i} by {w.index}\n" for i in range(30)])
    snapshot = state.snapshot()
    text, page = summary.render_text(snapshot), summary.render_summary_html(snapshot)
    for worker in (0, 1):
        assert f"[{worker}] printed 29 by {worker}" in text and f"[{worker}] printed 29 by {worker}" in page
        assert f"printed 19 by {worker}" not in text  # a bounded tail
    echoed = {**snapshot, ECHOED_KEY: True}
    assert "printed" not in summary.render_text(echoed) and "printed" not in summary.render_summary_html(echoed)
