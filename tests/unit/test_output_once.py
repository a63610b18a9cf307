"""A blocking cell's output once and clean (magics/views/dedupe.py, echo.py), and rich output as checked data
(protocol/mime.py, the session wire's ``display`` kind, the worker's bundles, the kernel's Out)."""

from __future__ import annotations

import base64
import io

import pytest

from nbworkers.distlib.worker.rich.output import RichOutput, bundle_of
from nbworkers.magics.run.core.state import WorkerState
from nbworkers.magics.views.dedupe import LineDeduper
from nbworkers.magics.views.echo import WorkerEcho
from nbworkers.magics.views.rich import RichItem, WorkersValue
from nbworkers.protocol import mime, wire

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\nfake").decode("ascii")


# ------------------------------------------------------------------------------ dedupe
def test_a_line_every_worker_prints_is_shown_once_whichever_worker_prints_it_first():
    d = LineDeduper(hold=2.0)
    d.note_worker(1)
    assert d.feed(0, ["Epoch 1/2", "loss 0.5"], now=0.0) == ["Epoch 1/2", "loss 0.5"]
    assert d.feed(1, ["Epoch 1/2"], now=0.1) == []  # worker 0 printed it: hidden at once
    assert d.feed(1, ["summary row"], now=0.2) == []  # not from worker 0 yet: held
    assert d.feed(0, ["summary row"], now=0.5) == ["summary row"]  # worker 0's copy came: worker 1's is dropped
    assert d.due(now=10.0, final=True) == {}
    assert d.hidden == 2


def test_lines_that_differ_are_shown_as_the_other_workers_after_the_hold_in_order():
    d = LineDeduper(hold=2.0)
    d.note_worker(1)
    d.feed(0, ["WORKER 0"], now=0.0)
    d.feed(1, ["WORKER 1", "also 1"], now=0.0)
    assert d.due(now=1.0) == {}
    assert d.due(now=2.5) == {1: ["WORKER 1", "also 1"]}


def test_equal_lines_are_counted_three_need_three():
    d = LineDeduper(hold=1.0)
    d.note_worker(1)
    d.feed(0, ["x", "x"], now=0.0)
    d.feed(1, ["x", "x", "x"], now=0.0)
    assert d.due(now=0.0, final=True) == {1: ["x"]}


def echo_snapshot(lines_by_worker, status="running"):
    workers = []
    for index, lines in enumerate(lines_by_worker):
        w = WorkerState(index=index, status=status)
        w.log_tail.feed([line + "\n" for line in lines])
        workers.append(w.snapshot())
    return {"workers": workers}


def test_the_echo_shows_worker_0_the_others_where_they_differ_and_no_markers():
    out = io.StringIO()
    echo = WorkerEcho(max_lines=100, tail_lines=5, out=out, dedupe_hold=60.0)
    lines = [["--- nbworkers: forked from zygote 12 (TensorFlow already imported)", "Model: sequential", "w 0"],
             ["--- nbworkers: worker 1, launch 0", "Model: sequential", "w 1"]]
    echo.tick(echo_snapshot(lines))
    echo.finish(echo_snapshot(lines, status="finished"))
    text = out.getvalue()
    assert text.count("Model: sequential") == 1 and "[0] w 0" in text and "[1] w 1" in text, text
    assert "--- nbworkers" not in text


def test_without_dedupe_every_worker_is_echoed():
    out = io.StringIO()
    echo = WorkerEcho(max_lines=100, tail_lines=5, out=out)
    echo.finish(echo_snapshot([["same"], ["same"]], status="finished"))
    assert out.getvalue().count("same") == 2


# ------------------------------------------------------------------------------ MIME bundles
@pytest.mark.parametrize("data, problem", [
    ({}, "non-empty"),
    ({"application/x-python-pickle": "gASV"}, "not one nbworkers shows"),
    ({"text/html": 3}, "not a str"),
    ({"image/png": "not base64!"}, "not valid base64"),
    ({"image/png": b"\x89PNG"}, "not a base64 str"),
    ("<b>", "non-empty object"),
])
def test_a_malformed_bundle_is_refused_with_what_is_wrong(data, problem):
    with pytest.raises(mime.BundleError, match=problem):
        mime.check_bundle(data)


def test_an_oversized_bundle_is_refused_and_a_good_one_passes():
    good = {"image/png": PNG, "text/plain": "<Figure>", "application/json": {"a": [1, 2]}}
    mime.check_bundle(good, {}, max_bytes=1000)
    with pytest.raises(mime.BundleError, match="display_max_bytes"):
        mime.check_bundle({"text/plain": "x" * 5000}, None, max_bytes=1000)


def test_the_display_kind_is_validated_on_the_wire():
    base = {"worker": 0, "gen": 1, "t": 0.0, "cell": 2, "source": "display", "metadata": {}}
    assert wire.validate("display", {**base, "data": {"text/html": "<b>x</b>"}}) is None
    assert "base64" in wire.validate("display", {**base, "data": {"image/png": "%%%"}})
    assert "source" in wire.validate("display", {**base, "source": "exec", "data": {"text/plain": "x"}})
    assert "cell" in wire.validate("display", {**base, "cell": 0, "data": {"text/plain": "x"}})


# ------------------------------------------------------------------------------ the worker's side
class Rich:
    def _repr_html_(self):
        return "<b>rich</b>"

    def _repr_png_(self):
        return b"\x89PNG\r\n\x1a\n"

    def __repr__(self):
        return "Rich()"


class Bundled:
    def _repr_mimebundle_(self, include=None, exclude=None):
        return {"text/html": "<i>b</i>", "application/x-secret": "dropped"}, {"text/html": {"isolated": True}}


def test_bundles_are_made_from_repr_methods_without_ipython():
    data, _ = bundle_of(Rich())
    assert data["text/html"] == "<b>rich</b>" and data["text/plain"] == "Rich()"
    assert base64.b64decode(data["image/png"]).startswith(b"\x89PNG")
    bundled = Bundled()
    data, meta = bundle_of(bundled)
    assert data == {"text/html": "<i>b</i>", "text/plain": repr(bundled)}  # only the types nbworkers shows
    assert meta == {"text/html": {"isolated": True}}


def test_the_worker_sends_display_from_worker_0_only_unless_all_and_drops_oversized():
    sent = []
    first = RichOutput(lambda kind, **f: sent.append((0, f)), 0)
    other = RichOutput(lambda kind, **f: sent.append((1, f)), 1)
    for output in (first, other):
        output.begin(3, "0", 10_000)
        output.display(Rich())
        output.show(42, source="result")  # every worker's value: the kernel compares them
    assert [(w, f["source"]) for w, f in sent] == [(0, "display"), (0, "result"), (1, "result")]
    assert sent[2][1]["data"] == {"text/plain": "42"}  # another worker's value: its text, to compare
    assert sent[0][1]["cell"] == 3
    sent.clear()
    other.begin(4, "all", 100)
    other.display(Rich())
    other.publish({"text/plain": "y" * 500}, None)
    assert len(sent) == 1 and other.dropped == 1


# ------------------------------------------------------------------------------ the kernel's Out
def test_the_value_is_worker_0s_and_the_others_where_they_differ():
    same = WorkersValue({1: RichItem(1, {"text/plain": "20"}),
                         0: RichItem(0, {"text/plain": "20", "text/html": "<b>20</b>"})})
    assert same._repr_mimebundle_()[0] == {"text/plain": "20", "text/html": "<b>20</b>"}
    differ = WorkersValue({0: RichItem(0, {"text/plain": "0"}), 1: RichItem(1, {"text/plain": "10"})})
    assert repr(differ) == "[0] 0\n[1] 10"


def test_ipythons_display_functions_become_the_workers_where_they_are_bound(monkeypatch):
    import sys
    import types

    for name in ("IPython.core.display", "IPython.display"):  # this process's IPython stays as it is
        monkeypatch.delitem(sys.modules, name, raising=False)

    sent = []
    output = RichOutput(lambda kind, **f: sent.append(f), 0)
    output.begin(1, "0", 10_000)
    module = types.SimpleNamespace(display=print, publish_display_data=print)
    output.patch_ipython(module)
    module.display(Rich())
    module.publish_display_data({"text/markdown": "*m*"})
    assert [f["data"].get("text/html") or f["data"].get("text/markdown") for f in sent] == ["<b>rich</b>", "*m*"]
