"""The widget's Python side without a browser: summary rendering, payload shaping, throttling, buttons."""

from __future__ import annotations

import json
import math
import sys
import threading
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from browser_helpers import FakeCluster  # noqa: E402

from nbworkers.magics import summary  # noqa: E402
from nbworkers.magics.state import ClusterState, WorkerState  # noqa: E402
from nbworkers.magics.widget import (  # noqa: E402
    WIDGET_MIMETYPE,
    ClusterWidgetView,
    Throttle,
    bundle,
    clean_number,
    downsample,
    logs_payload,
)


def make_state(status: str = "running", lines: int = 3, history: int = 0) -> ClusterState:
    state = ClusterState(
        name="demo",
        run_dir="/runs/demo",
        workers=[WorkerState(index=i, role="worker", role_index=i, host="h1", log_path=f"/runs/demo/worker-{i}.log") for i in range(2)],
    )
    state.status = status
    for w in state.workers:
        w.log_tail.feed([f"line {n}\n" for n in range(lines)])
        for step in range(history):
            w.apply_metrics({"step": step, "epoch": 1, "epochs_total": 3, "steps_total": history, "metrics": {"loss": 1 / (step + 1)}})
        w.status = status
    return state


class RecordingCluster:
    def __init__(self, state: ClusterState, fail: bool = False):
        self.name = state.name
        self.state = state
        self.fail = fail
        self.calls: list[tuple[str, str]] = []
        self.called = threading.Event()

    def snapshot(self):
        return self.state.snapshot()

    def stop(self):
        self.calls.append(("stop", threading.current_thread().name))
        self.called.set()
        if self.fail:
            raise RuntimeError("no such group")

    def restart(self):
        self.calls.append(("restart", threading.current_thread().name))
        self.called.set()


def recorded_view(cluster, interval: float = 3600.0) -> tuple[ClusterWidgetView, list[dict]]:
    view = ClusterWidgetView(cluster, interval=interval)
    messages: list[dict] = []
    view.widget.comm.send = lambda data=None, buffers=None, **kw: messages.append(data)
    return view, messages


# ----------------------------------------------------------------------------------------- summary


def test_render_text_running_lists_every_worker():
    snap = make_state("running", history=5).snapshot()
    text = summary.render_text(snap)
    assert text.splitlines()[0].startswith("nbworkers cluster demo: running, 2 workers")
    assert "#0 worker:0 running on h1" in text and "#1 worker:1" in text
    assert "epoch 1/3 step 4/5" in text and "loss=0.2" in text
    assert "logs: /runs/demo" in text


def test_render_summary_has_log_paths_metrics_and_wall_time():
    state = make_state("finished", history=5)
    state.ended = state.started + 12.5
    snap = state.snapshot()
    text = summary.render_text(snap)
    assert "finished, 2 workers, in 12.5 s" in text
    assert "log: /runs/demo/worker-1.log" in text
    html = summary.render_summary_html(snap)
    assert summary.render_html(snap) == html  # once done, the live HTML is the summary
    for needle in ("finished", "12.5 s", "/runs/demo/worker-0.log", "loss=0.2", "epoch 1/3"):
        assert needle in html


def test_failed_summary_shows_error_and_traceback_tail():
    state = make_state("failed", lines=40)
    state.error = "worker 1 exited with code 1"
    w = state.workers[1]
    w.exit_code = 1
    w.log_tail.feed(["Traceback (most recent call last):\n", '  File "x.py", line 1\n', "ValueError: <bad>\n"])
    snap = state.snapshot()
    text = summary.render_text(snap)
    assert "Error: worker 1 exited with code 1" in text
    assert text.rstrip().endswith("ValueError: <bad>")
    assert "line 5\n" not in text  # only the traceback, not the whole tail
    html = summary.render_summary_html(snap)
    assert "ValueError: &lt;bad&gt;" in html and "<bad>" not in html
    assert "exit code 1" in html


def test_traceback_tail_without_traceback_is_the_last_lines():
    assert summary.traceback_tail([str(i) for i in range(100)], limit=3) == ["97", "98", "99"]


def test_render_tolerates_a_partial_snapshot():
    assert "unknown" in summary.render_text({})
    assert summary.render_html({"status": "starting", "workers": [{}]})
    assert summary.render_summary_html({"status": "stopped"})


def test_format_helpers():
    assert summary.format_duration(75) == "1m 15s"
    assert summary.format_duration(3725) == "1h 02m 05s"
    assert summary.format_number(0.000012) == "1.200e-05"
    assert summary.format_number(float("nan")) == "nan"


# ----------------------------------------------------------------------------------------- payloads


def test_downsample_is_bounded_and_keeps_the_latest_step():
    history = [(i, {"loss": 1 / (i + 1)}) for i in range(5000)]
    series = downsample(history, 300)
    assert 150 <= len(series["x"]) <= 300
    assert series["x"][-1] == 4999
    assert len(series["metrics"]["loss"]) == len(series["x"])


def test_downsample_keeps_finished_buckets_stable_as_the_run_grows():
    history = [(i, {"loss": math.sin(i)}) for i in range(1000)]
    before = downsample(history[:900], 100)
    after = downsample(history, 100)
    n = len(before["x"]) - 1  # every bucket but the last (still filling)
    assert before["x"][:n] == after["x"][:n]
    assert before["metrics"]["loss"][:n] == after["metrics"]["loss"][:n]


def test_downsample_drops_nan_and_handles_sparse_metrics_and_restarts():
    history = [(0, {"loss": 1.0}), (1, {"loss": float("nan")}), (2, {"loss": 0.5, "val_loss": 0.7}), (0, {"loss": 2.0})]
    series = downsample(history, 300)
    assert series["x"] == [0, 1, 2, 0]
    assert series["metrics"]["loss"] == [1.0, None, 0.5, 2.0]
    assert series["metrics"]["val_loss"] == [None, None, 0.7, None]
    json.dumps(series, allow_nan=False)


def test_clean_number():
    assert clean_number(float("inf")) == "inf"
    assert clean_number(0.123456789) == 0.123457
    assert clean_number(3) == 3


def test_logs_payload_bounds_lines_and_line_length():
    snap = {"workers": [{"log_tail": ["x" * 5000] + [str(i) for i in range(500)]}]}
    logs = logs_payload(snap, max_lines=300, max_chars=100)
    assert len(logs[0]) == 300 and logs[0][-1] == "499"
    snap = {"workers": [{"log_tail": ["x" * 5000]}]}
    assert len(logs_payload(snap, 300, max_chars=100)[0][0]) < 120
    snap = {"workers": [{"log_tail": [f"{i:04d}" + "z" * 1995 for i in range(300)]}]}
    kept = logs_payload(snap, 300, max_total=64_000)[0]
    assert 25 <= len(kept) <= 32 and kept[-1].startswith("0299")


# ----------------------------------------------------------------------------------------- throttle


class FakeTimers:
    def __init__(self):
        self.pending: list = []

    def __call__(self, delay, fn):
        timer = type("T", (), {"cancel": lambda self_: self.pending.remove(entry) if entry in self.pending else None})()
        entry = (delay, fn)
        self.pending.append(entry)
        return timer

    def fire(self):
        _, fn = self.pending.pop(0)
        fn()


def test_throttle_sends_the_newest_item_on_the_trailing_edge():
    now = [0.0]
    sent: list = []
    timers = FakeTimers()
    throttle = Throttle(0.25, sent.append, clock=lambda: now[0], timer=timers)
    throttle.offer(1)
    assert sent == [1]
    now[0] = 0.1
    throttle.offer(2)
    throttle.offer(3)
    assert sent == [1] and len(timers.pending) == 1 and timers.pending[0][0] == pytest.approx(0.15)
    now[0] = 0.25
    timers.fire()
    assert sent == [1, 3]
    now[0] = 1.0
    throttle.offer(4)  # long after: at once
    assert sent == [1, 3, 4]


def test_throttle_flush_replaces_and_cancels_the_timer():
    now = [0.0]
    sent: list = []
    timers = FakeTimers()
    throttle = Throttle(0.25, sent.append, clock=lambda: now[0], timer=timers)
    throttle.offer("a")
    throttle.offer("b")
    throttle.flush("final", replace=True)
    assert sent == ["a", "final"] and timers.pending == []


# ----------------------------------------------------------------------------------------- the view


def test_update_sends_one_message_with_only_what_changed():
    state = make_state("running", history=3)
    cluster = RecordingCluster(state)
    view, messages = recorded_view(cluster, interval=0.0)
    view.update(state.snapshot())
    assert len(messages) == 1
    assert set(messages[0]["state"]) == {"cluster", "logs", "series", "updates"}
    view.update(state.snapshot())  # nothing changed but the wall clock: no message
    assert len(messages) == 1
    state.workers[0].log_tail.feed(["new line\n"])
    view.update(state.snapshot())
    assert len(messages) == 2 and set(messages[1]["state"]) == {"logs", "updates"}
    assert messages[1]["state"]["logs"][0][-1] == "new line"
    state.workers[1].apply_metrics({"step": 9, "metrics": {"loss": 0.01}})
    view.update(state.snapshot())
    assert set(messages[2]["state"]) == {"cluster", "series", "updates"}


def test_updates_are_coalesced_within_the_flush_interval():
    state = make_state("running")
    cluster = RecordingCluster(state)
    view, messages = recorded_view(cluster, interval=3600.0)
    threads = []
    for t in range(4):
        def feed(t=t):
            for n in range(250):
                state.workers[t % 2].log_tail.feed([f"t{t} {n}\n"])
                view.update(state.snapshot())
        threads.append(threading.Thread(target=feed))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(messages) == 1  # the first; the rest wait for the interval
    state.status = "finished"
    state.workers[0].log_tail.feed(["the last line\n"])
    view.finish(state.snapshot())
    assert len(messages) <= 3  # the change, then (finish only) the full state again
    final = messages[-1]["state"]
    assert final["cluster"]["status"] == "finished" and final["logs"][0][-1] == "the last line"
    assert view.widget.logs[0][-1] == "the last line"


def test_finish_resends_the_full_state_and_the_final_bundle():
    state = make_state("finished", history=3)
    cluster = RecordingCluster(state)
    view, messages = recorded_view(cluster, interval=0.0)
    view.update(state.snapshot())
    view.finish(state.snapshot())
    assert set(messages[-1]["state"]) >= {"cluster", "logs", "series"}
    data = bundle(view.widget, state.snapshot())
    assert data[WIDGET_MIMETYPE]["model_id"] == view.widget.model_id
    assert "finished" in data["text/plain"] and "nbw-summary" in data["text/html"]


def test_message_size_stays_small_with_full_tails_and_long_history():
    state = make_state("running", lines=1000, history=2000)
    for w in state.workers:
        w.log_tail.feed(["y" * 200 + "\n"] * 400)
    view, messages = recorded_view(RecordingCluster(state), interval=0.0)
    view.update(state.snapshot())
    size = len(json.dumps(messages[0]))
    assert size < 200_000, size
    assert all(len(s["x"]) <= 300 for s in messages[0]["state"]["series"])


def test_stop_and_restart_run_on_their_own_thread():
    cluster = RecordingCluster(make_state("running"))
    view, _ = recorded_view(cluster)
    view._on_custom_msg(view.widget, {"action": "stop"}, [])
    assert cluster.called.wait(10)
    assert cluster.calls[0][0] == "stop" and cluster.calls[0][1] == "nbworkers-stop"
    assert view.widget.notice.startswith("Stopping")
    cluster.called.clear()
    view._on_custom_msg(view.widget, {"action": "restart"}, [])
    assert cluster.called.wait(10) and cluster.calls[1][0] == "restart"
    view._on_custom_msg(view.widget, {"action": "rm -rf"}, [])
    view._on_custom_msg(view.widget, "garbage", [])
    assert len(cluster.calls) == 2


def test_a_failing_stop_is_reported_in_the_widget():
    cluster = RecordingCluster(make_state("running"), fail=True)
    view, _ = recorded_view(cluster)
    view._run_action("stop")
    assert view.widget.notice == "Stop failed: no such group"


def test_notice_clears_when_the_status_changes():
    state = make_state("running")
    view, _ = recorded_view(RecordingCluster(state), interval=0.0)
    view.update(state.snapshot())
    view._set_notice("Stopping…")
    state.status = "stopped"
    view.update(state.snapshot())
    assert view.widget.notice == ""


def test_fake_cluster_run_drives_the_view_to_finished():
    cluster = FakeCluster(steps=5, step_time=0.01, interval=0.0)
    view, messages = recorded_view(cluster, interval=0.0)
    cluster.views.append(view)
    cluster.start()
    assert cluster.wait(30)
    assert view.widget.cluster["status"] == "finished"
    assert [w["status"] for w in view.widget.cluster["workers"]] == ["finished", "finished"]
    assert view.widget.series[0]["x"] and view.widget.logs[0][-1] == "worker 0 finished"
