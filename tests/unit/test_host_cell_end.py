"""The worker host holds a worker to its cell's end (host/worker_host.py, ``--cell-end``): the end line the bootstrap
writes may come in any chunks; without it an exit with 0 becomes ``ENDED_EARLY_EXIT_CODE`` with a line that says
where the worker was. No process: the forwarder reads a pipe this test writes."""

from __future__ import annotations

import io
import os

from nbworkers.host.command import host_command
from nbworkers.host.worker_host import LogForwarder, ended_early
from nbworkers.protocol.wire import CELL_END_LINE, ENDED_EARLY_EXIT_CODE, ENDED_EARLY_LINE


class Log(io.BytesIO):
    def close(self) -> None:  # keep the bytes readable after the forwarder is done
        pass


def forward(*chunks: bytes) -> tuple[LogForwarder, bytes]:
    read, write = os.pipe()
    log = Log()
    with os.fdopen(read, "rb", buffering=0) as pipe:
        forwarder = LogForwarder(pipe, log, sender=None)
        for chunk in chunks:
            os.write(write, chunk)
        os.close(write)
        forwarder.run()
    return forwarder, log.getvalue()


def test_the_end_line_is_found_even_when_split_across_chunks():
    end = CELL_END_LINE.encode()
    forwarder, log = forward(b"epoch 1\nCHECKSUM 42\n" + end[:9], end[9:], b"atexit output\n")
    assert forwarder.cell_ended and log.endswith(b"atexit output\n")


def test_the_end_line_is_for_the_host_only_the_relay_never_carries_it():
    sent: list[list[str]] = []

    class Sender:
        def send(self, kind: str, lines: list[str]) -> None:
            sent.append(lines)

    read, write = os.pipe()
    log = Log()
    with os.fdopen(read, "rb", buffering=0) as pipe:
        forwarder = LogForwarder(pipe, log, sender=Sender())  # type: ignore[arg-type]
        os.write(write, b"CHECKSUM 42\n" + CELL_END_LINE.encode() + b"atexit output\n")
        os.close(write)
        forwarder.run()
    relayed = "".join(line for lines in sent for line in lines)
    assert forwarder.cell_ended and CELL_END_LINE.encode() in log.getvalue()
    assert relayed == "CHECKSUM 42\natexit output\n"


def test_no_end_line_means_the_worker_left_early_and_the_log_says_where_it_was():
    forwarder, _ = forward(b"epoch 1\nstep 7/70\r", b"step 8/70\n--- nbworkers: forked from zygote 12\n")
    assert not forwarder.cell_ended
    assert forwarder.last_output() == "step 8/70"  # nbworkers' own lines are not where the cell was
    log = Log()
    assert ended_early(log, forwarder.last_output()) == ENDED_EARLY_EXIT_CODE
    line = log.getvalue().decode()
    assert line.startswith(ENDED_EARLY_LINE) and line.endswith("(its last output: step 8/70)\n")


def test_every_launch_of_nbworkers_own_holds_its_worker_to_the_cells_end():
    command = host_command("/usr/bin/python3", ["--log", "/tmp/x.log"])
    assert command[command.index("--") - 3:command.index("--")] == ["--cell-end", "--log", "/tmp/x.log"]
