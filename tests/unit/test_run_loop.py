"""The run loop's queue and its participants (magics/run/loop.py), with a recording participant and no processes:
what a participant asks of the run while the loop carries out an action waits its turn, its own core's events too,
so no core is re-entered; a participant holds a port (magics/run/port.py), not the loop."""

from __future__ import annotations

import sys
import threading

from nbworkers.magics.backends.local import LocalBackend
from nbworkers.magics.launch.spec import LaunchSpec
from nbworkers.magics.run.core import events as ev
from nbworkers.magics.run.core.failures import UserRestart
from nbworkers.magics.run.loop import RunLoop
from nbworkers.magics.run.port import RunPort
from nbworkers.magics.settings import WorkerSettings


class Recorder:
    """A participant that asks for a restart when it hears the run failed (as a session asks for one when its
    cells' state is lost), and adds a part to the snapshot."""

    def __init__(self, handled: list[str]) -> None:
        self.heard: list[str] = []
        self.handled = handled  # the run core's events and this participant's own, in the order they were handled

    def begin_run(self, port):
        self.port = port

    def before_launch(self, hosts, curve):
        return {}

    def relayed(self, event):
        pass

    def take(self, event):
        self.handled.append(event)

    def tick(self):
        pass

    def idle(self):
        return True

    def on_run_action(self, action):
        self.heard.append(type(action).__name__)
        if isinstance(action, ev.StopGroup) and not self.port.now().restart_pending:
            self.port.post("its own core's event")  # a session's: after the run's events posted before it
            self.port.post(ev.RestartRequested(UserRestart("the participant's reason")))

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
    depth, deepest, handled = [0], [0], []
    recorder = Recorder(handled)
    loop = RunLoop(spec, WorkerSettings(run_root=str(tmp_path / "runs")), LocalBackend(), threading.RLock(),
                   participants=[recorder])
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
    # one after the other, never inside: the participant's own event in its turn, after the run's actions
    assert handled == ["StopRequested", "its own core's event", "RestartRequested"] and deepest[0] == 1
    assert recorder.heard[0] == "StopGroup"
    with loop.lock:
        snapshot = loop.snapshot()
    assert snapshot["session"] == {"heard": recorder.heard} and snapshot["dropped"] == {"data": 3}


def test_a_participant_gets_a_port_of_five_members_not_the_loop(tmp_path):
    spec = LaunchSpec(code="x = 1", workers=3, name="port", python=sys.executable, cwd=str(tmp_path))
    recorder = Recorder([])
    loop = RunLoop(spec, WorkerSettings(run_root=str(tmp_path / "runs")), LocalBackend(), threading.RLock(),
                   participants=[recorder])
    port = recorder.port
    assert not isinstance(port, RunLoop) and not hasattr(port, "core") and not hasattr(port, "state")
    members = {name for name in dir(RunPort) if not name.startswith("_")}
    assert members == {"facts", "now", "post", "changed", "dropped"}
    assert port.facts.name == "port" and port.facts.lock is loop.lock and port.facts.key == loop.key
    with loop.lock:
        now = port.now()
        assert (now.generation, now.workers, now.ending, now.restart_pending) == (0, 3, False, False)
        loop.dirty = False
        port.changed()
        assert loop.dirty
