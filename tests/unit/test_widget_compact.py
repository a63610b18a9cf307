"""The compact view's aggregation (magics/views/compact.py, band_chart.py) and payloads: pure, no kernel."""

from __future__ import annotations

import json
import math
from typing import Any

from nbworkers.magics.run.core.state import ClusterState, WorkerState
from nbworkers.magics.views import band_chart, compact, summary
from nbworkers.magics.views.widget import view_payloads


def worker(index: int, **fields: Any) -> dict[str, Any]:
    base = {"index": index, "role": "worker", "role_index": index, "status": "running", "epoch": None,
            "epochs_total": None, "step": None, "steps_total": None, "metrics": {}, "steps_per_sec": None,
            "restarts": 0, "log_tail": [], "log_total": 0, "history": []}
    return {**base, **fields}


def run_state(workers: int = 16, steps: int = 400, diverging: int | None = None, straggler: int | None = None,
              warning: int | None = None) -> ClusterState:
    """``workers`` training in step on a noisy loss with a global lr; one may diverge, lag or log a warning."""
    state = ClusterState(name="big", run_dir="/runs/big", workers=[
        WorkerState(index=i, role="chief" if i == 0 else "worker", role_index=0 if i == 0 else i - 1)
        for i in range(workers)])
    for w in state.workers:
        w.status = "running"
        mine = steps // 2 if w.index == straggler else steps
        for s in range(1, mine + 1):
            loss = 2.0 * math.exp(-s / 150) + 0.01 * math.sin(s * 7 + w.index * 3)
            if w.index == diverging and s > steps // 4:
                loss += 0.01 * (s - steps // 4)
            w.apply_metrics({"step": (s - 1) % 100 + 1, "steps_total": 100, "epoch": (s - 1) // 100 + 1,
                             "epochs_total": 10, "metrics": {"loss": loss, "lr": 0.001}, "t": 1000.0 + s})
        w.log_tail.feed([f"worker {w.index} step {mine}\n"])
        if w.index == warning:
            w.log_tail.feed(["WARNING: slow input pipeline\n"])
    return state


def test_compact_from_the_setting_on():
    assert not compact.is_compact(7, 8) and compact.is_compact(8, 8) and compact.is_compact(64, 8)
    assert not compact.is_compact(64, 0)  # 0: never


def test_stragglers_come_first():
    workers = [
        worker(0, role="chief", epoch=3, epochs_total=5, step=50, steps_total=100, steps_per_sec=2.0),
        worker(1, epoch=3, epochs_total=5, step=40, steps_total=100, steps_per_sec=2.0),
        worker(2, epoch=2, epochs_total=5, step=90, steps_total=100, steps_per_sec=1.1),  # the straggler
        worker(3, epoch=3, epochs_total=5, step=40, steps_total=100, steps_per_sec=1.9),  # as far as 1, slower
        worker(4, status="failed"),
        worker(5, status="finished"),
        worker(6, status="waiting"),
    ]
    # by status; among the running ones the lagging one (2: 12 points of the run behind) first, the rest by index:
    # 3 is as far as 1 and slower, 1 and 3 are 2 points behind the chief: no lag worth moving a row for
    assert compact.straggler_order(workers) == [4, 6, 2, 0, 1, 3, 5]
    assert compact.progress_fraction(workers[2]) == (1 + 0.9) / 5 and compact.progress_fraction(workers[6]) is None


def test_metrics_equal_on_every_worker_are_shared():
    workers = [worker(i, metrics={"loss": 0.5 + i / 10, "lr": 0.001, "global_acc": 0.812345678 + i * 1e-12})
               for i in range(4)] + [worker(4)]  # a worker that has not reported yet does not count
    assert compact.shared_metrics(workers) == {"lr": 0.001, "global_acc": 0.812345678}
    workers[2]["metrics"]["lr"] = 0.002
    assert "lr" not in compact.shared_metrics(workers)
    assert compact.shared_metrics(workers[:1]) == {}  # one worker: nothing to share


def test_outliers_are_scored_robustly():
    values = [(i, 1.0 + 0.01 * (i % 3)) for i in range(20)] + [(20, 3.0), (21, math.nan)]
    scored = compact.score_outliers(values)
    assert [i for _, i in scored] == [21, 20] and scored[0][0] == math.inf
    assert compact.score_outliers(values, skip={20, 21}) == []
    # most workers agree exactly (a global metric): any other value is an outlier
    assert [i for _, i in compact.score_outliers([(i, 0.5) for i in range(10)] + [(10, 0.6)])] == [10]
    assert compact.score_outliers([(0, 1.0), (1, 5.0)]) == []  # too few to have a median worth the name


def test_the_band_holds_every_worker_but_the_outliers_and_the_chief_is_a_line():
    snapshot = run_state(workers=16, diverging=7).snapshot()
    chart = compact_chart(snapshot["workers"])
    assert chart["outliers"] == {"loss": [7]}
    assert 100 <= len(chart["x"]) <= 300 and chart["x"] == sorted(chart["x"]) and chart["x"][-1] == 400
    lows, highs = chart["band"]["loss"]
    assert len(lows) == len(highs) == len(chart["x"]) and all(lo <= hi for lo, hi in zip(lows, highs))
    lines = {line["index"]: line["metrics"] for line in chart["lines"]}
    assert set(lines) == {0, 7} and set(lines[0]) == {"loss", "lr"} and set(lines[7]) == {"loss"}
    # the diverging worker is drawn, not in the band; the chief is inside it
    assert lines[7]["loss"][-1] > highs[-1] + 1
    assert all(lo <= y <= hi for lo, y, hi in zip(lows, lines[0]["loss"], highs) if y is not None)
    assert chart["band"]["lr"] == [[0.001] * len(lows)] * 2


def compact_chart(workers):
    return band_chart.chart_payload(workers, 300, compact.chief_index(workers))


def sixteen_equal(step: int, rates: list[float], behind: dict[int, int] | None = None) -> list[dict[str, Any]]:
    """16 workers at ``step`` of 1000 (``behind``: some steps fewer), each at its steps/s."""
    return [worker(i, step=step - (behind or {}).get(i, 0), steps_total=1000, steps_per_sec=rates[i])
            for i in range(16)]


def test_equal_workers_keep_their_rows_whatever_their_steps_per_second():
    rows = compact.SteadyRows()
    orders = set()
    for second in range(10):  # every second other tiny differences: a step more or less, steps/s in the 3rd digit
        rates = [2.0 + 0.001 * ((i * 7 + second * 3) % 11) for i in range(16)]
        behind = {(second * 5) % 16: 1, (second * 3) % 16: 2}
        orders.add(tuple(rows.update(sixteen_equal(300 + 10 * second, rates, behind))))
    assert orders == {tuple(range(16))}


def test_a_row_moves_on_a_clear_lag_and_back_only_once_the_worker_caught_up():
    rows = compact.SteadyRows()
    rates = [2.0] * 16
    assert rows.update(sixteen_equal(500, rates, {9: 40}))[0] == 0  # 4 points behind: below LAG_ENTER
    assert rows.update(sixteen_equal(500, rates, {9: 60}))[0] == 9  # 6 points: lagging, first row
    assert rows.update(sixteen_equal(500, rates, {9: 30}))[0] == 9  # 3 points: between the two, still lagging
    assert rows.update(sixteen_equal(500, rates, {9: 10})) == list(range(16))  # within LAG_LEAVE: back in place
    assert rows.update(sixteen_equal(500, rates, {9: 40}))[0] == 0  # and 4 points does not move it again


def test_a_status_change_moves_a_row_at_once():
    workers = sixteen_equal(500, [2.0] * 16)
    workers[12] = {**workers[12], "status": "failed"}
    workers[3] = {**workers[3], "status": "finished"}
    order = compact.SteadyRows().update(workers)
    assert order[0] == 12 and order[-1] == 3 and order[1:-1] == [i for i in range(16) if i not in (3, 12)]


def test_without_totals_a_lag_is_a_share_of_the_furthest_workers_steps():
    workers = [worker(i, step=100 - (20 if i == 2 else i % 2)) for i in range(8)]
    assert compact.lagging_workers(workers) == {2} and compact.straggler_order(workers)[0] == 2


def test_a_straggler_is_no_outlier_for_being_behind():
    snapshot = run_state(workers=16, straggler=3).snapshot()
    assert compact_chart(snapshot["workers"])["outliers"] == {}
    assert compact.straggler_order(snapshot["workers"])[0] == 3


def test_a_diverged_worker_is_an_outlier():
    state = run_state(workers=10)
    state.workers[4].apply_metrics({"step": 1, "metrics": {"loss": math.nan}})
    chart = compact_chart(state.snapshot()["workers"])
    assert chart["outliers"]["loss"][0] == 4


def test_the_chart_kept_from_update_to_update_equals_one_made_at_once():
    state = run_state(workers=12, steps=150, diverging=5)
    kept = band_chart.ChartAccumulator(300)
    for more in range(150, 700, 50):  # the run grows: the buckets widen by merging pairs
        for w in state.workers:
            for s in range(more + 1, more + 51):
                loss = 2.0 * math.exp(-s / 150) + (0.01 * (s - 100) if w.index == 5 else 0.001 * w.index)
                w.apply_metrics({"step": s, "metrics": {"loss": loss}})
        workers = state.snapshot()["workers"]
        kept.update(workers)
        found = kept.outliers(exclude=[0])
        assert found == {"loss": [5]}
        assert kept.payload(band_chart.lines_to_draw(0, found), found) == {
            k: v for k, v in compact_chart(workers).items() if k != "outliers"}


def test_flagged_workers_are_the_failed_and_the_warned():
    workers = [worker(0, role="chief", log_tail=["step 1"]), worker(1, log_tail=["WARNING: slow"], log_total=1),
               worker(2, status="failed"), worker(3, log_tail=["loss: mean_squared_error 0.2"]),
               worker(4, log_tail=["Traceback (most recent call last):", "ValueError: x"])]
    assert compact.flagged_workers(workers) == [1, 2, 4]  # a metric named *_error is no error
    scanner = compact.FlagScanner()
    assert scanner.update(workers) == [1, 2, 4]
    workers[3] = {**workers[3], "log_tail": workers[3]["log_tail"] + ["ERROR: disk full"], "log_total": 2}
    assert scanner.update(workers) == [1, 2, 3, 4]
    assert compact.log_workers(workers, [1, 2, 3, 4], picked=9) == [0, 1, 2, 3, 4]
    assert compact.log_workers(workers, [], picked=3) == [0, 3]


def test_64_workers_fit_in_small_messages():
    state = run_state(workers=64, steps=2000, diverging=9)
    for w in state.workers:
        w.log_tail.feed([f"a long log line of worker {w.index}, number {n}\n" for n in range(300)])
    state.workers[17].log_tail.feed(["WARNING: slow input pipeline\n"])
    snapshot = state.snapshot()
    compact_payload = view_payloads(snapshot, max_points=300, max_lines=300, compact_from=8)
    full = view_payloads(snapshot, max_points=300, max_lines=300, compact_from=100)
    size = {k: len(json.dumps(v)) for k, v in compact_payload.items()}
    assert sum(size.values()) < 150_000 and sum(size.values()) * 5 < sum(len(json.dumps(v)) for v in full.values())
    assert compact_payload["series"] == [] and full["compact"] == {}
    data = compact_payload["compact"]
    assert data["shared"] == {"lr": 0.001} and data["flagged"] == [17] and data["logs_of"] == [0, 17]
    assert data["outliers"] == {"loss": [9]} and len(data["order"]) == 64
    assert all("lr" not in card["metrics"] for card in compact_payload["cluster"]["workers"])
    logs = compact_payload["logs"]
    assert len(logs) == 64 and logs[5] == [] and logs[17][-1] == "WARNING: slow input pipeline" and len(logs[0]) == 300


def test_the_summary_at_64_workers_is_one_table():
    state = run_state(workers=64, diverging=9, warning=17, straggler=3)
    state.status = "finished"
    state.ended = state.started + 90
    for w in state.workers:
        w.status = "finished"
        w.log_path = f"/runs/big/worker-{w.index}.log"
    snapshot = state.snapshot()
    text = summary.render_text(snapshot)
    lines = text.splitlines()
    assert len(lines) < 64 + 12, text  # one row per worker and the tails of two logs, no paragraphs
    assert "every worker: lr=0.001" in text and text.count("lr=") == 1
    assert "logs: /runs/big/worker-<index>.log" in text and "worker-5.log" not in text
    html = summary.render_summary_html(snapshot)
    assert html.count("<tr>") == 65 and html.count("lr=0.001") == 1
    assert html.count("--- last lines of") == 2  # the chief's output and the warned worker's, not 64
    assert "[17] WARNING: slow input pipeline" in html and "[5] " not in html


class Run:
    def __init__(self, state: ClusterState):
        self.name, self.state = state.name, state

    def snapshot(self):
        return self.state.snapshot()

    def stop(self):
        pass

    def restart(self):
        pass


def test_the_log_picker_brings_that_workers_log(monkeypatch):
    import comm

    from nbworkers.magics.views.widget import ClusterWidgetView

    monkeypatch.setattr(comm, "create_comm", comm._create_comm)  # no kernel: the comm package's own comm
    monkeypatch.setattr(comm, "get_comm_manager", comm._get_comm_manager)
    run = Run(run_state(workers=16, steps=50))
    view = ClusterWidgetView(run)
    view.update(run.snapshot())
    assert view.widget.compact["logs_of"] == [0] and view.widget.logs[5] == []
    updates = view.widget.updates
    view._on_custom_msg(view.widget, {"action": "log", "worker": 5}, [])
    assert view.widget.compact["logs_of"] == [0, 5] and view.widget.logs[5] == ["worker 5 step 50"]
    assert view.widget.updates == updates + 1
    view._on_custom_msg(view.widget, {"action": "log", "worker": "5; rm"}, [])  # not an index: ignored
    assert view.widget.compact["logs_of"] == [0, 5]
    view.close()


def test_a_new_run_of_the_cell_starts_a_new_chart():
    kept = band_chart.ChartAccumulator(300)
    kept.update(run_state(workers=10, steps=600).snapshot()["workers"])
    again = run_state(workers=10, steps=40).snapshot()["workers"]  # new states, new histories
    kept.update(again)
    found = kept.outliers(exclude=[0])
    assert kept.payload(band_chart.lines_to_draw(0, found), found) == {
        k: v for k, v in compact_chart(again).items() if k != "outliers"}
    assert kept.width == 1 and max(kept.last_x.values()) == 40


def test_trouble_words_are_whole_words_in_any_case():
    assert compact.shows_trouble("W1125 WARNING: slow") and compact.shows_trouble("Traceback (most recent call last):")
    assert compact.shows_trouble("an error.") and compact.shows_trouble("FATAL")
    assert not compact.shows_trouble("loss: 0.1 - mean_squared_error: 0.2 - val_error_rate: 3 - errors=0")
    assert not compact.shows_trouble("")


def test_the_overview_prints_a_range_of_one_value_once():
    workers = [worker(i, step=41 + i % 3, steps_total=1000, steps_per_sec=2.01 + 0.01 * (i % 2)) for i in range(16)]
    assert summary.overview_text({"workers": workers}) == "16 running; progress 4 %; 2.0 steps/s"
    workers[0] = {**workers[0], "step": 70, "steps_per_sec": 3.0}
    assert summary.overview_text({"workers": workers}) == "16 running; progress 4-7 %; 2.0-3.0 steps/s"
