"""A worker's terminal output as every view reads it (protocol/terminal.py): Keras' coloured progress bar, written
as Keras 3.15's Progbar(verbose=1) writes it, ends as one plain line per finished bar in the kernel's log tail
(relayed chunks, cut anywhere), in ``%workers logs`` and in the REST API's log."""

from __future__ import annotations

import json

from nbworkers.magics.run.core.logtail import LogTail
from nbworkers.magics.run.noise import DEFAULT_LEVEL, NoiseFilter, shown_log
from nbworkers.magics.run.outputs import read_logs
from nbworkers.magics.rundir.layout import log_path, read_log, read_tail
from nbworkers.protocol.terminal import TerminalStream, settled_lines, strip_codes

BACKSPACES = "\b" * 52


def bar(step: int, loss: str) -> str:
    """One update of Keras 3's progress bar of 4 steps (captured from keras.src.utils.progbar.Progbar)."""
    done = 5 * step
    return (f"\r\x1b[1m{step}/4\x1b[0m \x1b[32m{'━' * done}\x1b[0m\x1b[37m{'━' * (20 - done)}\x1b[0m "
            f"\x1b[1m0s\x1b[0m 11us/step - loss: {loss}")


EPOCH = ("Epoch 1/2\n" + bar(1, "0.5000") + BACKSPACES + bar(2, "0.3750") + BACKSPACES + bar(3, "0.3056")
         + BACKSPACES + bar(4, "0.1250") + "\n")
FINISHED = "4/4 ━━━━━━━━━━━━━━━━━━━━ 0s 11us/step - loss: 0.1250"
OUTPUT = EPOCH + "done\n"
SHOWN = ["Epoch 1/2", FINISHED, "done"]


def test_a_log_file_reads_as_a_cell_shows_it_one_line_per_finished_bar():
    assert settled_lines(OUTPUT) == SHOWN
    assert settled_lines("a\r\nb\n") == ["a", "b"] and settled_lines("12%\r50%\r") == ["50%"]  # \r at the end keeps
    assert settled_lines("ab\bc\n\x07\x1b]0;title\x07x\x1b[2K\n") == ["ac", "x"]  # backspace, bell, a title, erase
    assert strip_codes("\x1b[1;31mred\x1b[0m\tx") == "red\tx"


def test_relayed_chunks_cut_anywhere_end_in_the_log_tail_as_the_file_reads():
    for size in (1, 3, 7, 50, len(OUTPUT)):
        noise = NoiseFilter(DEFAULT_LEVEL)
        tail = LogTail()
        for start in range(0, len(OUTPUT), size):
            tail.feed(noise.filter([OUTPUT[start:start + size]]))
        assert tail.lines() == SHOWN, size
        assert not any("\x1b" in line or "[37" in line or "\b" in line for line in tail.lines())


def test_a_code_cut_at_a_chunks_end_is_held_until_its_end_comes():
    stream = TerminalStream()
    assert stream.feed("a\x1b[3") == "a" and stream.feed("7mb") == "b"
    assert stream.feed("c\x1b") == "c" and stream.flush() == ""
    assert stream.feed("\x1b]8;;http://x\x1b") == "" and stream.feed("\\link") == "link"


def test_percent_workers_logs_and_the_rest_api_read_the_file_settled(tmp_path):
    run_dir = tmp_path / "bars"
    run_dir.mkdir()
    (run_dir / "state.json").write_text(json.dumps({"workers": [{"index": 0}, {"index": 1}]}))
    for index in range(2):
        log_path(run_dir, index).write_bytes(OUTPUT.encode())
    assert read_logs(run_dir, 2, worker=1).split("\n") == SHOWN  # cluster.logs: %workers logs NAME -w 1
    assert read_logs(run_dir, 2).split("\n") == [f"[{i}] {line}" for i in range(2) for line in SHOWN]
    assert read_log(run_dir, 0).split("\n") == SHOWN  # an attached run's logs and the REST API's source
    assert shown_log(OUTPUT).split("\n") == SHOWN and shown_log(OUTPUT, tail=1) == "done"
    assert read_tail(log_path(run_dir, 0), 2).split("\n") == SHOWN[1:]  # a failed worker's tail in its error
