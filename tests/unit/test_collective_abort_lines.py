"""The lines TensorFlow logs when nbworkers aborts a group's collectives after one worker's error stay out of the
cell (magics/collective_abort.py, through magics/run/noise.py's filter), and nothing else does."""

from __future__ import annotations

from nbworkers.magics.collective_abort import ABORT_PATTERNS, is_collective_abort
from nbworkers.magics.run.noise import NoiseFilter, is_noise

# as worker 0 of a session logged them when worker 1 raised (tests/integration/test_sessions_saved_state.py)
START_ABORT = ("E0000 00:00:1795811468.219249   14146 base_collective_executor.cc:252] "
               "BaseCollectiveExecutor::StartAbort UNAVAILABLE: worker 1 of session 'train' failed in cell 6\n")
RING_ABORT = ("E0000 00:00:1795811468.219351   14146 ring_alg.cc:291] Aborting RingReduce with UNAVAILABLE: "
              "Collective ops is aborted by: worker 1 of session 'train' failed in cell 6\n")
OTHER_OP = ("W0000 00:00:1795811468.3   14146 kernel_ops.cc:12] Op AllReduce ended: Collective ops is aborted by: "
            "worker 1 failed\n")
USER_ERROR = "E0000 00:00:1795811468.5   14146 op_kernel.cc:1830] OP_REQUIRES failed: Incompatible shapes [2] vs [3]\n"


def test_the_abort_lines_are_dropped_at_the_default_level_and_kept_when_the_user_wants_everything():
    for line in (START_ABORT, RING_ABORT, OTHER_OP):
        assert is_noise(line, 2) and is_noise(line, 1), line
        assert not is_noise(line, 0), line  # TF_CPP_MIN_LOG_LEVEL=0: the user sees every line
    assert not is_noise(USER_ERROR, 2)  # TensorFlow's other errors still reach the cell


def test_only_tensorflow_log_lines_are_matched_not_the_users_own_output():
    assert not is_noise("Aborting RingReduce with UNAVAILABLE: my own print\n", 2)
    assert not is_noise("print: BaseCollectiveExecutor::StartAbort UNAVAILABLE\n", 2)
    assert is_collective_abort("BaseCollectiveExecutor::StartAbort UNAVAILABLE: x")
    assert not is_collective_abort("about: BaseCollectiveExecutor::StartAbort")  # the message starts with it
    assert len(ABORT_PATTERNS) == 3


def test_a_cells_relayed_chunks_keep_everything_but_the_abort_lines():
    noise = NoiseFilter(2)
    kept = noise.filter(["step 1\n" + START_ABORT, RING_ABORT + "Traceback (most recent", " call last):\n"])
    assert "".join(kept) == "step 1\nTraceback (most recent call last):\n" and noise.dropped == 2
