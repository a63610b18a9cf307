"""The run loop's queue and its participants (magics/run/loop.py), with a recording participant and no processes:
what a participant asks of the run while the loop carries out an action waits its turn, so no core is re-entered."""

from __future__ import annotations

import sys
import threading

from nbworkers.magics.backends.local import LocalBackend
from nbworkers.magics.launch.spec import LaunchSpec
from nbworkers.magics.run.core import events as ev
from nbworkers.magics.run.core.failures import UserRestart
from nbworkers.magics.run.loop import RunLoop
from nbworkers.magics.settings import WorkerSettings


class Recorder:
    """A participant that asks for a restart when it hears the run failed (as a session asks for one when its
    cells' state is lost), and adds a part to the snapshot."""

    def __init__(self) -> None:
        self.heard: list[str] = []

    def begin_run(self, loop):
        self.loop = loop

    def before_launch(self):
        return {}

    def on_message(self, message):
        return False

    def tick(self):
        pass

    def idle(self):
        return True

    def on_run_action(self, action):
        self.heard.append(type(action).__name__)
        if isinstance(action, ev.StopGroup) and not self.loop.core.restart_pending:
            self.loop.post(ev.RestartRequested(UserRestart("the participant's reason")))

    def after_round(self):
        pass

    def snapshot_part(self, snapshot):
        return {**snapshot, "session": {"heard": list(self.heard)}}

    def drop_counts(self, counts):
        counts["data"] = 3

    def run_ended(self):
        pass

    def launch_failed(self):
        pass


def test_what_a_participant_posts_while_an_action_is_carried_out_is_handled_after_it(tmp_path):
    spec = LaunchSpec(code="x = 1", workers=2, name="loop", python=sys.executable, cwd=str(tmp_path))
    recorder = Recorder()
    loop = RunLoop(spec, WorkerSettings(run_root=str(tmp_path / "runs")), LocalBackend(), threading.RLock(),
                   participants=[recorder])
    depth, deepest, handled = [0], [0], []
    handle = loop.core.handle

    def counted(event):
        depth[0] += 1
        deepest[0] = max(deepest[0], depth[0])
        handled.append(type(event).__name__)
        try:
            return handle(event)
        finally:
            depth[0] -= 1

    loop.core.handle = counted  # type: ignore[method-assign]
    with loop.lock:
        loop.post(ev.StopRequested())
    assert handled == ["StopRequested", "RestartRequested"] and deepest[0] == 1  # one after the other, never inside
    assert recorder.heard[0] == "StopGroup"
    with loop.lock:
        snapshot = loop.snapshot()
    assert snapshot["session"] == {"heard": recorder.heard} and snapshot["dropped"] == {"data": 3}
