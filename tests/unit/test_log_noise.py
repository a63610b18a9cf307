"""What the user's log views leave out (magics/run/noise.py): one pattern list, used by the kernel's relayed output
(NoiseFilter) and by the server extension's log endpoint (shown_log), checked against the lines their writers
really write."""

from __future__ import annotations

from nbworkers.magics.run.noise import (
    DEFAULT_LEVEL,
    OWN_LINES,
    NoiseFilter,
    is_noise,
    is_own_line,
    launch_line,
    shown_log,
)
from nbworkers.protocol import session_wire, wire

CONFIG = '{"cluster": {"worker": ["localhost:1", "localhost:2"]}, "task": {"type": "worker", "index": 0}}'
FORKED = "--- nbworkers: forked from zygote 4242 (TensorFlow already imported)\n"  # distlib/worker/zygote.py
CHATTER = [
    "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n",
    "I0000 00:00:1795425037.110247   12655 cudart_stub.cc:31] Could not find cuda drivers on your machine.\n",
    "E0000 00:00:1795425039.857075   12655 cuda_platform.cc:52] failed call to cuInit: INTERNAL: CUDA error\n",
]
KEPT = [  # what went wrong and why a worker ended stays in every view
    "--- nbworkers: stopped (line 3 of the cell)\n",
    "--- nbworkers: node lost: Ray node 127.0.0.4 node 0a1b2c3d is dead\n",
    "--- nbworkers: restarting the group (failed): worker 1 exited with code 1\n",
    "E0000 00:00:1.5   1 collective_ops.cc:3] real error\n",
    "epoch 1 loss 0.5\n",
]


def test_nbworkers_own_bookkeeping_lines_match_what_their_writers_write():
    for line in (launch_line("worker", 0, 0, "2", CONFIG), launch_line("ps", 12, 3, "0", "{}"), FORKED,
                 session_wire.marker(3, "start"), session_wire.marker(12, "end"), wire.CELL_END_LINE,
                 f"{wire.WATCHER_STOPPED_LINE} PeerTerminationWatcher-1: failed to connect to all addresses\n"):
        assert is_own_line(line) and is_own_line(line.rstrip("\n")), line
    assert is_own_line("--- nbworkers: worker 1, launch 0, TF_CONFIG={}\n")  # a log written before the level was
    for line in KEPT:
        assert not is_own_line(line), line
    assert len(OWN_LINES) == 5


def test_the_kernel_drops_bookkeeping_and_chatter_from_relayed_output_a_session_routes_by_the_cell_markers():
    marker = session_wire.marker(1, "start")
    relayed = [FORKED + "".join(CHATTER) + marker + "".join(KEPT)]
    routed = NoiseFilter(DEFAULT_LEVEL)  # a session's filter before its LogRouter: the markers pass
    assert "".join(routed.filter(relayed)) == marker + "".join(KEPT)
    assert routed.dropped == len(CHATTER) and routed.own_dropped == 1  # dropped: the TensorFlow lines the widget counts
    shown = NoiseFilter(DEFAULT_LEVEL)  # the run's views (magics/run/messages.py): the markers go too
    assert "".join(shown.filter(relayed, OWN_LINES)) == "".join(KEPT) and shown.own_dropped == 2
    quiet_off = NoiseFilter(0)  # the user asked for TensorFlow's chatter: nbworkers' lines still go
    assert "".join(quiet_off.filter([FORKED, *CHATTER])) == "".join(CHATTER)
    split = NoiseFilter(2)  # a line cut across chunks is never half-dropped
    assert "".join(split.filter(["partial --- nbworkers: forked from zygote 1 (x)\n"])).startswith("partial")


def test_the_server_filters_a_log_file_at_the_level_its_launch_line_records():
    body = FORKED + "".join(CHATTER) + session_wire.marker(1, "start") + "".join(KEPT)
    default = launch_line("worker", 0, 0, "2", CONFIG) + body
    assert shown_log(default) == "".join(KEPT).rstrip("\n")
    assert shown_log(default, tail=2) == "".join(KEPT[-2:]).rstrip("\n") and shown_log(default, tail=0) == ""
    verbose = launch_line("worker", 0, 0, "0", CONFIG) + body  # %%worker --env TF_CPP_MIN_LOG_LEVEL=0
    assert shown_log(verbose) == "".join(CHATTER + KEPT).rstrip("\n")
    relaunched = verbose + launch_line("worker", 0, 1, "3", CONFIG) + "".join(CHATTER) + "E0000 00:00:1.5   1 a.cc:3] x\n"
    assert shown_log(relaunched).endswith("epoch 1 loss 0.5")  # launch 1 at level 3 hides its E lines too
    assert shown_log("".join(CHATTER) + "hello\n") == "hello"  # the launch line was cut: the default level


def test_is_noise_is_both_kinds():
    assert is_noise(FORKED, 0) and is_noise(CHATTER[1], 1) and not is_noise(CHATTER[1], 0)
    assert not any(is_noise(line, DEFAULT_LEVEL) for line in KEPT)


def test_a_runs_log_events_carry_neither_kind_of_noise():
    from nbworkers.magics.run.messages import Translator, WorkerOutput
    from nbworkers.magics.run.relay import Message

    translator = Translator(DEFAULT_LEVEL, 1)  # one noise filter per worker, for the run and its session alike
    text = FORKED + "".join(CHATTER) + session_wire.marker(2, "start") + "epoch 1\n" + session_wire.marker(2, "end")
    [output, logged], drop = translator.events(Message("log", {"gen": 0, "worker": 0, "lines": [text]}), 0,
                                               lambda i: "")
    assert drop is None and "".join(logged.lines) == "epoch 1\n" and logged.hidden == len(CHATTER)
    # a session's cells route the output by its markers: they stay in the output the participant gets
    assert output == WorkerOutput(0, session_wire.marker(2, "start") + "epoch 1\n" + session_wire.marker(2, "end"))


# After a Stop of a Keras fit (worker 0's log, TensorFlow 2.21): the C++ line comes on stderr while the progress bar's
# line on stdout is open, and its message goes on over lines of gRPC detail; the Python traceback after it stays.
OPEN_BAR = "\b" * 20 + "\r\x1b[1m 14/200\x1b[0m \x1b[32m━\x1b[0m\x1b[37m━━━\x1b[0m \x1b[1m2s\x1b[0m 13ms/step - loss: 0.0882"
GRPC = ("Additional GRPC error information from remote target /job:worker/replica:0/task:1 while calling "
        "/tensorflow.WorkerService/RecvBuf:\n"
        ':UNKNOWN:Error received from peer  {grpc_status:14, grpc_message:"recvmsg:Connection reset by peer"}\n')
ABORTED_AFTER_STOP = [
    OPEN_BAR,
    "E0000 00:00:1795901023.106908   24614 ring_alg.cc:291] Aborting RingReduce with UNAVAILABLE: Socket closed\n"
    + GRPC + GRPC + "The error could be from a previous operation. Restart your program to reset.\n"
    "\t [[{{function_node __inference_one_step_on_data_500}}{{node sgd/CollectiveReduceV2}}]] "
    "[type.googleapis.com/tensorflow.DerivedStatus='']\n",
    "Traceback (most recent call last):\n  File \"cell.py\", line 14, in <module>\n"
    "tensorflow.python.framework.errors_impl.UnavailableError: Graph execution error:\n"
    "Collective ops is aborted by: recvmsg:Connection reset by peer\n" + GRPC,
]
SHOWN_AFTER_STOP = [" 14/200 ━━━━ 2s 13ms/step - loss: 0.0882", "Traceback (most recent call last):",
                    '  File "cell.py", line 14, in <module>',
                    "tensorflow.python.framework.errors_impl.UnavailableError: Graph execution error:",
                    "Collective ops is aborted by: recvmsg:Connection reset by peer", *GRPC.splitlines()]


def test_after_a_stop_the_aborted_ring_reduce_and_its_grpc_lines_are_hidden_the_traceback_is_not():
    from nbworkers.magics.run.core.logtail import LogTail

    for chunks in (ABORTED_AFTER_STOP, ["".join(ABORTED_AFTER_STOP)]):  # the C++ line in a chunk of its own, or not
        noise, tail = NoiseFilter(DEFAULT_LEVEL), LogTail()
        for chunk in chunks:
            tail.feed(noise.filter([chunk]))
        assert tail.lines() == SHOWN_AFTER_STOP and noise.dropped == 1 + 2 * 2 + 2
    unredrawn = NoiseFilter(DEFAULT_LEVEL)  # text before a C++ line that no progress bar redrew: not chatter
    assert unredrawn.filter(["note E0000 00:00:1.5   1 ring_alg.cc:291] Aborting RingReduce\n"]) == [
        "note E0000 00:00:1.5   1 ring_alg.cc:291] Aborting RingReduce\n"]
    assert shown_log("".join(ABORTED_AFTER_STOP)).split("\n") == SHOWN_AFTER_STOP  # the sidebar's Log panel
    everything = NoiseFilter(0)  # TF_CPP_MIN_LOG_LEVEL=0: the user asked for all of it
    assert "".join(everything.filter(ABORTED_AFTER_STOP)).count("Additional GRPC") == 3
