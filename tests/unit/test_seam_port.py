"""The seam between the run loop and its participants (issue 40.1): relay messages read once into typed events for
both cores (magics/run/messages.py), and tools/seams.py's AST check that nothing outside the loop assigns a loop's
or a core's fields."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from nbworkers.magics.run import messages as relayed
from nbworkers.magics.run.core import events as ev
from nbworkers.magics.run.noise import DEFAULT_LEVEL
from nbworkers.magics.run.relay import Message
from nbworkers.protocol import session_wire
from nbworkers.protocol.statuses import CellEnd

ROOT = Path(__file__).resolve().parents[2]


def _seams():
    spec = importlib.util.spec_from_file_location("nbworkers_seams_tool", ROOT / "tools" / "seams.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _events(translator, kind, gen=0, worker=0, **content):
    return translator.events(Message(kind, {"gen": gen, "worker": worker, **content}), 1, lambda i: f"node-{i}")


def test_every_relay_message_kind_is_read_once_into_a_typed_event():
    translator = relayed.Translator(DEFAULT_LEVEL, 2)
    assert _events(translator, "cell", gen=1, event="start", cell=3) == ([relayed.CellStarted(0, 3)], None)
    assert _events(translator, "cell", gen=1, worker=1, event="paused", cell=3, step=7)[0] == [
        relayed.CellPaused(1, 3, 7)]
    end = _events(translator, "cell", gen=1, event="end", cell=3, status="error", error="E", aborted=True, step=4)
    assert end[0] == [relayed.CellEnded(0, 3, CellEnd.ERROR, "E", "", True, None, 4)]
    saved = _events(translator, "cell", gen=1, event="saved", cell=3, dir="/d",
                    saved=[{"name": "m", "kind": "model", "detail": "2 layers", "cell": 2}],
                    skipped=[{"name": "f", "why": "a file"}])
    assert saved[0] == [relayed.CellSaved(0, (("m", "model", "2 layers"),), (("f", "a file"),), "/d", "", (("m", 2),))]
    shown = _events(translator, "display", gen=1, cell=3, source="display", data={"text/plain": "1"})
    assert shown[0] == [relayed.Displayed(0, 3, "display", {"text/plain": "1"}, {})]
    assert _events(translator, "hello", gen=1, worker=1, pid=42, host="h")[0] == [ev.Hello(1, 42, "node-1")]
    assert _events(translator, "status", gen=1, state="running")[0] == [ev.StatusReported(0, "running", "")]
    # an earlier launch's message, a worker the run does not have: dropped with their reason
    assert _events(translator, "cell", gen=0, event="start", cell=1) == ([], ("stale", "generation 0"))
    assert _events(translator, "log", gen=1, worker=2, lines=["x\n"]) == ([], ("malformed", "no worker 2"))


def test_one_noise_filter_serves_the_run_and_its_cells():
    translator = relayed.Translator(DEFAULT_LEVEL, 1)
    start = session_wire.marker(1, "start")
    pieces = ["W0000 00:00:1.5   1 a.cc:3] chatter\nloss", " 0.4\n", start + "loss 0.5\n"]
    outputs, lines = "", ""
    for piece in pieces:
        [output, logged], _ = _events(translator, "log", gen=1, lines=[piece])
        outputs, lines = outputs + output.text, lines + "".join(logged.lines)
    assert outputs == "loss 0.4\n" + start + "loss 0.5\n" and lines == "loss 0.4\nloss 0.5\n" and logged.hidden == 1
    translator.new_generation(2)  # a relaunch: its output starts afresh, the hidden lines still count
    [output, logged], _ = _events(translator, "log", gen=1, worker=1, lines=["x\n"])
    assert output.text == "x\n" and _events(translator, "log", gen=1, lines=["y\n"])[0][1].hidden == 1


def test_the_seams_check_finds_an_assignment_into_a_loop_or_a_core(tmp_path):
    seams = _seams()
    reaching = tmp_path / "participant.py"
    reaching.write_text("def f(self, session, core):\n"
                        "    self.loop.dirty = True\n"  # the old participant's
                        "    session.cluster.loop.detached = True\n"
                        "    core.resize_note = 'x'\n"
                        "    self._part.core.saved, other = None, 1\n"
                        "    setattr(self.loop.relay, 'x', 1)\n"
                        "    self.core = object()\n"  # its own field: fine
                        "    self.port.changed()\n")
    found = seams.findings([reaching])
    assert [line.split(": ")[0].rsplit(":", 1)[1] for line in found] == ["2", "3", "4", "5", "6"]
    # the repository as it is: tools/lint.py's `seams` (tests/integration/test_lint.py)
