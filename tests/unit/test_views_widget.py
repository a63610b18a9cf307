"""The widget's Python side without a browser: summary rendering, payload shaping, sending, buttons, assets."""

from __future__ import annotations

import fnmatch
import json
import math
import re
import threading
import tomllib
from pathlib import Path

import pytest
from browser_helpers import FakeCluster  # noqa: E402

from nbworkers.magics.run.core.state import ClusterState, WorkerState  # noqa: E402
from nbworkers.magics.views import summary, widget  # noqa: E402
from nbworkers.magics.views.widget import (  # noqa: E402
    WIDGET_MIMETYPE,
    ClusterWidget,
    ClusterWidgetView,
    bundle,
    clean_number,
    downsample,
    logs_payload,
)
from nbworkers.magics.views.words import status_css  # noqa: E402
from nbworkers.protocol.statuses import ClusterStatus, WorkerStatus  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
MAGICS = REPO / "magics" / "views"


@pytest.fixture(autouse=True)
def plain_comms(monkeypatch):
    """Widgets made here get the `comm` package's own comm, whatever ran before in this process.

    Importing ``ipykernel.kernelapp`` (a ``Cluster`` does, in ``_kernel_id``) makes ipykernel the provider of
    every later comm; outside a running kernel such a comm has no kernel and ipywidgets drops its messages
    without a word, so the message recorder below would see none.
    """
    import comm

    monkeypatch.setattr(comm, "create_comm", comm._create_comm)
    monkeypatch.setattr(comm, "get_comm_manager", comm._get_comm_manager)


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


def recorded_view(cluster) -> tuple[ClusterWidgetView, list[dict]]:
    view = ClusterWidgetView(cluster)
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


def test_an_attached_live_run_says_it_is_a_snapshot_that_will_not_update():
    live = {**make_state("running", history=2).snapshot(), "attached": True}
    text, html = summary.render_text(live), summary.render_summary_html(live)
    assert "will not update" in text.splitlines()[1] and "`%workers attach demo` again" in text
    assert "will not update" in html and "nbw-snapshot-note" in html
    ended = {**make_state("finished").snapshot(), "attached": True}
    assert "will not update" not in summary.render_text(ended)  # an ended run's snapshot is its final state
    assert "will not update" not in summary.render_text(make_state("running").snapshot())  # this kernel's own run


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


# ----------------------------------------------------------------------------------------- the view


def test_update_sends_one_message_with_only_what_changed():
    state = make_state("running", history=3)
    cluster = RecordingCluster(state)
    view, messages = recorded_view(cluster)
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


def test_updates_from_several_threads_go_out_whole_one_at_a_time():
    """The cluster paces the updates (one per flush_interval); the view sends each at once, never two mixed."""
    state = make_state("running")
    cluster = RecordingCluster(state)
    view, messages = recorded_view(cluster)
    lock = threading.Lock()
    threads = []
    for t in range(4):
        def feed(t=t):
            for n in range(50):
                with lock:
                    state.workers[t % 2].log_tail.feed([f"t{t} {n}\n"])
                    snapshot = state.snapshot()
                view.update(snapshot)
        threads.append(threading.Thread(target=feed))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert 1 < len(messages) <= 200  # no throttle here: every update that changed something went out
    assert [m["state"]["updates"] for m in messages] == list(range(1, len(messages) + 1))
    assert all(len(m["state"]["logs"]) == 2 for m in messages if "logs" in m["state"])  # whole payloads
    state.status = "finished"
    state.workers[0].log_tail.feed(["the last line\n"])
    view.finish(state.snapshot())
    final = messages[-1]["state"]  # finish: the change, then the full state again
    assert set(final) >= {"cluster", "logs", "series"}
    assert final["cluster"]["status"] == "finished" and final["logs"][0][-1] == "the last line"
    assert view.widget.logs[0][-1] == "the last line"


def test_an_update_right_after_another_is_sent_at_once():
    state = make_state("running")
    view, messages = recorded_view(RecordingCluster(state))
    view.update(state.snapshot())
    state.workers[1].log_tail.feed(["next\n"])
    view.update(state.snapshot())
    assert len(messages) == 2 and messages[1]["state"]["logs"][1][-1] == "next"


def test_finish_resends_the_full_state_and_the_final_bundle():
    state = make_state("finished", history=3)
    cluster = RecordingCluster(state)
    view, messages = recorded_view(cluster)
    view.update(state.snapshot())
    view.finish(state.snapshot())
    assert set(messages[-1]["state"]) >= {"cluster", "logs", "series"}
    data = bundle(view.widget, state.snapshot())
    assert data[WIDGET_MIMETYPE]["model_id"] == view.widget.model_id
    assert "finished" in data["text/plain"] and "nbw-summary" in data["text/html"]


class RecordingHandle:
    def __init__(self) -> None:
        self.bundles: list[dict] = []

    def update(self, data, raw=False):
        self.bundles.append(data)


def test_a_finished_run_that_runs_again_gets_its_live_fallback_back():
    state = make_state("finished", history=3)
    view, _ = recorded_view(RecordingCluster(state))
    view._handle = handle = RecordingHandle()
    view.finish(state.snapshot())
    assert "nbw-summary" in handle.bundles[-1]["text/html"]
    view.update(state.snapshot())  # still finished: the summary stays
    assert len(handle.bundles) == 1
    state.status = "running"  # restarted: the fallback shows the live run, once
    view.update(state.snapshot())
    view.update(state.snapshot())
    assert len(handle.bundles) == 2 and "nbw-fallback" in handle.bundles[-1]["text/html"]
    assert "running" in handle.bundles[-1]["text/plain"].splitlines()[0]


def test_message_size_stays_small_with_full_tails_and_long_history():
    state = make_state("running", lines=1000, history=2000)
    for w in state.workers:
        w.log_tail.feed(["y" * 200 + "\n"] * 400)
    view, messages = recorded_view(RecordingCluster(state))
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
    view, _ = recorded_view(RecordingCluster(state))
    view.update(state.snapshot())
    view._set_notice("Stopping…")
    state.status = "stopped"
    view.update(state.snapshot())
    assert view.widget.notice == ""


def test_fake_cluster_run_drives_the_view_to_finished():
    cluster = FakeCluster(steps=5, step_time=0.01, interval=0.0)
    view, messages = recorded_view(cluster)
    cluster.views.append(view)
    cluster.start()
    assert cluster.wait(30)
    assert view.widget.cluster["status"] == "finished"
    assert [w["status"] for w in view.widget.cluster["workers"]] == ["finished", "finished"]
    assert view.widget.series[0]["x"] and view.widget.logs[0][-1] == "worker 0 finished"


# ----------------------------------------------------------------------------------------- front-end assets


def js_object_keys(source: str, name: str) -> set[str]:
    body = re.search(rf"const {name} = \{{(.*?)\n\}};", source, re.S)
    assert body, f"{name} not found in widget_cards.js"
    return set(re.findall(r"^\s*(\w+):", body.group(1), re.M))


def test_every_status_has_a_label_and_the_terminal_ones_count_as_done():
    source = (MAGICS / "widget_cards.js").read_text()
    statuses = {s.value for s in ClusterStatus} | {s.value for s in WorkerStatus}
    assert statuses <= js_object_keys(source, "STATUS_LABELS")
    done = set(re.findall(r'"(\w+)"', re.search(r"const DONE = new Set\(\[(.*?)\]\)", source).group(1)))
    assert done == {s.value for s in ClusterStatus if s.is_terminal}
    css = str(ClusterWidget._css)  # the badges' colours: generated from protocol/statuses.py LOOKS
    missing = [s for s in statuses if f".nbw-status-{s} {{ background: var(--nbw-status-{s}); }}" not in css]
    assert not missing, f"no badge colour in the widget's CSS for {missing}"


def test_the_widget_module_carries_the_vendored_chart_library():
    esm, css = str(ClusterWidget._esm), str(ClusterWidget._css)
    library = (widget.UPLOT_DIR / "uPlot.iife.min.js").read_text()
    assert f"(v{widget.UPLOT_VERSION})" in library.splitlines()[0] and "var uPlot=" in library
    names = ("widget_cards.js", "widget_chart.js", "widget_title.js", "widget_header.js", "widget_panels.js", "widget.js")
    parts = [library] + [(MAGICS / name).read_text() for name in names]
    assert esm == "\n".join(parts)  # in this order: each part uses what the ones before declare
    assert "new uPlot(" in parts[2] and esm.count("export default") == 1 and parts[-1].rstrip().endswith("export default { render };")
    assert all(len(part.splitlines()) < 400 for part in parts[1:]), "a part of the widget's module over 400 lines"
    own = esm[len(library):]
    assert not re.search(r"^\s*import\b|import\(|https?://", own, re.M)  # nothing fetched at run time
    declared = re.findall(r"^(?:function|const|let|class) (\w+)", own, re.M)
    assert len(declared) == len(set(declared)), "a name declared in two parts of the one module"
    assert css.startswith((widget.UPLOT_DIR / "uPlot.min.css").read_text()) and ".nbw-chart" in css
    styles = [(MAGICS / name).read_text() for name in ("widget.css", "widget_compact.css")]
    assert css.endswith("\n".join(styles) + "\n" + status_css()) and ".nbw-compact" in styles[1]
    assert all(len(style.splitlines()) < 400 for style in styles), "a part of the widget's style over 400 lines"
    assert "MIT License" in (widget.UPLOT_DIR / "LICENSE").read_text()


def test_the_vendored_files_and_license_are_package_data():
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    patterns = config["tool"]["setuptools"]["package-data"]["nbworkers.magics.views"]
    shipped = [p.relative_to(MAGICS).as_posix() for p in (MAGICS / "vendor-uplot").iterdir()]
    assert {f"vendor-uplot/{name}" for name in ("LICENSE", "uPlot.iife.min.js", "uPlot.min.css")} <= set(shipped)
    for path in shipped + [p.name for p in widget.ESM_PARTS + widget.CSS_PARTS if p.parent == MAGICS]:
        assert any(fnmatch.fnmatch(path, p) for p in patterns), f"{path} is not package data"
