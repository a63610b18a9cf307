"""One vocabulary: worker statuses defined once (in the protocol), one line capper, the settings that replaced
module constants. No kernel, no TensorFlow, no subprocess."""

from __future__ import annotations

import importlib.util
import io
import re
from pathlib import Path

import pytest

from nbworkers.host.worker_host import LineCap
from nbworkers.magics.launch import roles
from nbworkers.magics.run.core.logtail import DEFAULT_TAIL_LINES, LogTail
from nbworkers.magics.settings import WorkerSettings
from nbworkers.magics.views import summary
from nbworkers.magics.views.echo import WorkerEcho
from nbworkers.magics.views.widget import logs_payload
from nbworkers.protocol import env_settings, statuses, wire
from nbworkers.protocol import statuses as protocol_statuses
from nbworkers.protocol.env_settings import EnvSettingWarning
from nbworkers.protocol.lines import CUT_NOTE, SHORT_CUT_NOTE, cap_line, cut_note

# ---- statuses


def test_the_statuses_are_defined_in_the_protocol_alone():
    assert importlib.util.find_spec("nbworkers.magics.run.core.statuses") is None  # the re-export is gone
    assert all(enum.__module__ == "nbworkers.protocol.statuses" for enum in (
        statuses.ClusterStatus, statuses.WorkerStatus, statuses.ViewStatus, statuses.CellState, statuses.CellEnd))


def test_the_wire_accepts_what_workers_may_send_and_nothing_the_kernel_alone_sets():
    W = protocol_statuses.WorkerStatus
    assert set(wire.WORKER_STATES) == {"starting", "waiting", "running", "finished", "failed", "stopped", "restarting"}
    assert W.STOPPING not in wire.WORKER_STATES and W.LOST not in wire.WORKER_STATES
    assert wire.validate("status", {"worker": 0, "gen": 0, "t": 0.0, "state": W.RUNNING}) is None
    assert wire.validate("status", {"worker": 0, "gen": 0, "t": 0.0, "state": W.LOST.value}) == "unknown state 'lost'"


def test_a_status_enum_is_its_string():
    W, C = statuses.WorkerStatus, statuses.ClusterStatus
    assert W.FAILED == "failed" and str(W.FAILED) == "failed" and f"{C.LOST}" == "lost"
    assert {W.RUNNING: 1}.get("running") == 1  # dict keys from the enums answer plain strings from a state file
    assert W.FINISHED.is_terminal and not W.STOPPING.is_terminal
    assert statuses.is_terminal("lost") and not statuses.is_terminal("running") and not statuses.is_terminal("")


def test_the_run_and_its_workers_end_on_the_same_four_statuses():
    W, C = statuses.WorkerStatus, statuses.ClusterStatus
    assert issubclass(C, protocol_statuses.Status) and issubclass(W, protocol_statuses.Status)
    assert {c.value for c in C if c.is_terminal} == {w.value for w in W if w.is_terminal} == {
        "finished", "failed", "stopped", "lost"}


REPO = Path(__file__).resolve().parents[2]


def _js_set(path: Path, name: str) -> set[str]:
    """The strings of ``const NAME = new Set([...])`` (or ``export const``) in a front-end file."""
    found = re.search(rf"const {name}(?:: [\w<>]+)? = new Set(?:<\w+>)?\(\[(.*?)\]\)", path.read_text())
    assert found, f"no `const {name} = new Set([...])` in {path.relative_to(REPO)}"
    return set(re.findall(r"[\"'](\w+)[\"']", found.group(1)))


def test_the_ended_statuses_are_defined_once_and_the_front_ends_copies_hold_to_them():
    C, W = statuses.ClusterStatus, statuses.WorkerStatus
    assert statuses.ENDED == {s for s in C if s.is_terminal} == {s for s in W if s.is_terminal}
    assert statuses.RECORDED_ENDS == statuses.ENDED - {C.LOST}  # LOST: concluded by others, never recorded
    assert _js_set(REPO / "labextension" / "src" / "statuses.ts", "ENDED") == statuses.ENDED
    assert _js_set(REPO / "magics" / "views" / "widget_cards.js", "DONE") == statuses.ENDED


def test_every_status_a_card_shows_belongs_to_an_enum_with_a_label():
    every = {s.value for enum in (statuses.ClusterStatus, statuses.WorkerStatus, statuses.ViewStatus) for s in enum}
    assert {"queued", "detached"} <= every
    source = (REPO / "magics" / "views" / "widget_cards.js").read_text()
    labels = re.search(r"const STATUS_LABELS = \{(.*?)\n\};", source, re.S)
    assert labels and set(re.findall(r"^\s*(\w+):", labels.group(1), re.M)) == every


def _js_string(path: Path, name: str) -> str:
    """The string of ``const NAME = "..."`` (or ``export const NAME = '...'``) in a front-end file."""
    found = re.search(rf"const {name} = [\"']([^\"']*)[\"'];", path.read_text())
    assert found, f"no `const {name} = \"...\"` in {path.relative_to(REPO)}"
    return found.group(1)


def test_a_run_whose_kernel_went_away_reads_stopped_with_one_reason_everywhere():
    """Kernel restarted or died: the reaper, the REST rows, %workers, the widget and the sidebar say one thing."""
    assert protocol_statuses.KERNEL_GONE.startswith(protocol_statuses.LOST_LABEL) and "run the cell again" in \
        protocol_statuses.KERNEL_GONE
    assert _js_string(REPO / "magics" / "views" / "widget_cards.js", "KERNEL_GONE") == protocol_statuses.KERNEL_GONE
    assert f"export const KERNEL_GONE =\n  \"{protocol_statuses.KERNEL_GONE}\";" in (
        REPO / "labextension" / "src" / "statuses.ts").read_text()
    source = (REPO / "magics" / "views" / "widget_cards.js").read_text()
    assert re.search(rf'^\s*lost: "{protocol_statuses.LOST_LABEL}",', source, re.M)
    assert f'lost: "{protocol_statuses.LOST_LABEL}",' in (REPO / "labextension" / "src" / "statuses.ts").read_text()
    assert summary.status_label("lost").startswith(protocol_statuses.LOST_LABEL)


def test_every_status_a_view_shows_has_one_look_and_the_summary_and_the_widget_show_it():
    every = {s.value for enum in (statuses.ClusterStatus, statuses.WorkerStatus, statuses.ViewStatus) for s in enum}
    looks = protocol_statuses.LOOKS
    assert set(looks) == every == set(summary.STATUS_LABELS) == set(summary.STATUS_COLORS)
    assert all(re.fullmatch(r"#[0-9a-f]{6}", look.colour) for look in looks.values())
    assert summary.STATUS_COLORS == {status: look.colour for status, look in looks.items()}
    assert {s: label for s, label in summary.STATUS_LABELS.items() if s != "lost"} == {
        s: look.label for s, look in looks.items() if s != "lost"}  # lost: the summary says why in full
    source = (REPO / "magics" / "views" / "widget_cards.js").read_text()
    labels = re.search(r"const STATUS_LABELS = \{(.*?)\n\};", source, re.S)
    assert labels and dict(re.findall(r'^\s*(\w+): "([^"]*)"', labels.group(1), re.M)) == {
        s: look.label for s, look in looks.items()}


def test_the_cell_states_sit_beside_the_run_statuses_in_the_protocol():
    C = protocol_statuses.CellState
    assert {c for c in C if c.is_terminal} == {C.FINISHED, C.FAILED, C.STOPPED, C.CANCELLED, C.LOST}
    assert all(c.view_status in protocol_statuses.ClusterStatus for c in C)  # a view shows each as a run status


# ---- one line capper


def test_cap_line_cuts_with_the_note_that_names_the_limit():
    assert cap_line("abc", 3) == "abc"
    assert cap_line("abcdef", 3) == "abc" + CUT_NOTE.format(limit=3) == "abc" + cut_note(3)
    assert cap_line("abcdef", 3, SHORT_CUT_NOTE) == "abc …[cut]"


def test_the_host_the_log_tail_and_the_views_cut_alike():
    long = "x" * 500
    host = LineCap(100)(long + "\n")
    tail = LogTail(10, max_line_chars=100)
    tail.feed([long + "\n"])
    assert host == cap_line(long, 100) + "\n"
    assert tail.lines() == [cap_line(long, 100)]
    widget = logs_payload({"workers": [{"log_tail": [long]}]}, max_lines=10, max_chars=100)
    assert widget == [[cap_line(long, 100, SHORT_CUT_NOTE)]]


def test_the_echo_cuts_at_its_setting(monkeypatch):
    from nbworkers.magics import settings as settings_module

    config = WorkerSettings(echo_line_chars=10)
    monkeypatch.setattr(settings_module, "_settings", config)
    out = io.StringIO()
    echo = WorkerEcho(max_lines=5, tail_lines=5, out=out)
    assert echo.line_chars == 10 and echo.traceback_hold == config.echo_traceback_hold
    tail = LogTail(10)
    tail.feed(["y" * 30 + "\n"])
    echo.tick({"workers": [{"index": 0, "status": "running", "log_tail": tail.lines(), "log_total": tail.total}]})
    echo.finish({"workers": [{"index": 0, "status": "finished", "log_tail": tail.lines(), "log_total": tail.total}]})
    assert "y" * 10 + SHORT_CUT_NOTE in out.getvalue()


# ---- settings that were module constants


def test_one_default_for_each_duplicated_value():
    settings = WorkerSettings()
    assert settings.log_tail_lines == DEFAULT_TAIL_LINES
    assert roles.evaluator_grace(settings) == settings.evaluator_grace == 60.0
    settings.evaluator_grace = 1.5
    assert roles.evaluator_grace(settings) == 1.5


@pytest.mark.parametrize("setting", [env_settings.LOG_BATCH_INTERVAL, env_settings.ZYGOTE_REQUEST_TIMEOUT])
def test_a_zero_interval_is_refused_with_a_warning(setting):
    with pytest.warns(EnvSettingWarning, match=setting.name):
        assert setting.get({setting.name: "0"}) == setting.default
    assert setting.get({setting.name: "0.5"}) == 0.5


def test_one_blocking_echo_for_runs_and_session_cells(monkeypatch):
    from nbworkers.magics import settings as settings_module
    from nbworkers.magics.views.echo import blocking_echo

    monkeypatch.setattr(settings_module, "_settings", WorkerSettings(echo_lines=0))
    assert blocking_echo() is None
    monkeypatch.setattr(settings_module, "_settings", WorkerSettings(echo_lines=7, echo_tail_lines=3))
    echo = blocking_echo()
    assert echo is not None and (echo.max_lines, echo.tail_lines) == (7, 3)


def _vocabulary_tool():
    spec = importlib.util.spec_from_file_location("nbworkers_vocabulary_tool", REPO / "tools" / "vocabulary.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_sidebars_statuses_are_written_from_the_protocol():
    """labextension/src/statuses.ts (the union type, labels, ended set) and style/statuses.css (the colours) are
    what tools/vocabulary.py writes from protocol/statuses.py now; the sidebar defines no status colour of its own."""
    tool = _vocabulary_tool()
    assert tool.stale() == [], "run `python tools/vocabulary.py --write`, then `make labextension`"
    assert all(f".nbw-sb-status-{s} {{ background: {look.colour}; }}" in tool.statuses_css()
               for s, look in protocol_statuses.LOOKS.items())
    assert all(f'| "{s}"' in tool.statuses_ts() for s in statuses.ClusterStatus)
    base = (REPO / "labextension" / "style" / "base.css").read_text()
    assert not re.search(r"\.nbw-sb-status-[\w-]+\s*[{,]", base), "a status colour in base.css: LOOKS defines them"
    assert "status: RunStatus;" in (REPO / "labextension" / "src" / "api.ts").read_text()


def _status_words_tool():
    spec = importlib.util.spec_from_file_location("nbworkers_status_words", REPO / "tools" / "status_words.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_status_words_are_strings_only_in_the_protocol_and_enums(tmp_path):
    """tools/lint.py's `words` check (it walks the whole package; tests/integration/test_lint.py runs it): a status
    written as a string outside protocol/ and enums is a finding; a field's name, a docstring and an enum's body are
    not."""
    tool = _status_words_tool()
    code = ('"""running, as a docstring."""\nfrom enum import Enum\nclass Mood(str, Enum):\n    RUNNING = "running"\n'
            'def f(row, w):\n    if row["detached"] and row.get("lost"):\n        return {"queued": 1}\n'
            '    send(state="failed")\n    return w.status == "finished" or getattr(w, "stopped", None)\n')
    assert tool.findings_in(code) == [(8, "failed"), (9, "finished")]
    (tmp_path / "magics").mkdir()
    (tmp_path / "magics" / "m.py").write_text(code)
    assert tool.findings(tmp_path, ["magics"]) == [
        f"magics/m.py:{line}: {word!r} (use the enum's member: protocol/statuses.py)" for line, word in
        [(8, "failed"), (9, "finished")]]


FRONT_END_STATUS_USES = (  # where the widget's JavaScript and the sidebar's TypeScript name a status
    r"(?<!content\.)status\s*[!=]==?\s*[\"']\w+[\"']",  # w.status === "failed" (not a kernel reply's content.status)
    r"[\"']\w+[\"']\s*[!=]==?\s*[\w.\[\]]*status\b",
    r"\[[^\]]*\]\.includes\([\w.]*status\)",  # ["stopped", "finished"].includes(w.status)
    r"(?:DETAIL_STATES|DONE|ENDED)(?::\s*[\w<>]+)?\s*=\s*new Set(?:<\w+>)?\(\[[^\]]*\]",
)


def test_every_status_the_front_ends_compare_with_is_the_protocols():
    """The front ends cannot import the protocol: each status their code compares with is one of its words, so a
    renamed or mistyped status fails here."""
    every = {s.value for enum in (statuses.ClusterStatus, statuses.WorkerStatus, statuses.ViewStatus) for s in enum}
    files = [*sorted((REPO / "magics" / "views").glob("widget*.js")),
             *sorted((REPO / "labextension" / "src").glob("*.ts"))]
    named: dict[str, set[str]] = {}
    for path in files:
        text = path.read_text()
        for pattern in FRONT_END_STATUS_USES:
            for use in re.finditer(pattern, text):
                named.setdefault(path.name, set()).update(re.findall(r"[\"'](\w+)[\"']", use.group(0)))
    assert {"failed", "finished", "waiting"} <= named["widget_cards.js"] and "stopped" in named["widget_header.js"]
    kernels = {"dead"}  # widget.js also compares its Jupyter kernel's status ("dead": the kernel died)
    strangers = {name: words - every - kernels for name, words in named.items() if words - every - kernels}
    assert not strangers, f"statuses the protocol does not define (protocol/statuses.py): {strangers}"
