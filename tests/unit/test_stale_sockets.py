"""What a kernel or a detached run's supervisor killed with ``kill -9`` leaves of its channels, removed at the next
load: its Unix socket files (``sockets.sweep_stale``, by the pid in their names) and a detached session's client
file in its run directory (``leftovers.reap``)."""

from __future__ import annotations

import os
import socket
from pathlib import Path

from nbworkers.magics.run import sockets
from nbworkers.magics.rundir import layout as rundir
from nbworkers.magics.rundir.leftovers import reap

DEAD_PID = 2 ** 22 + 7  # above Linux's largest pid_max: no process has it


def bound(path: Path) -> Path:
    """A real socket file at ``path`` (its socket closed, as a killed process leaves it)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(path))
    sock.close()
    return path


def test_the_sockets_of_dead_binders_go_and_everything_else_stays(tmp_path):
    dead = bound(tmp_path / f"relay-{DEAD_PID}-0123456789ab.sock")
    live = bound(tmp_path / f"session-{os.getpid()}-0123456789ab.sock")
    other_name = bound(tmp_path / f"zygote-{DEAD_PID}.sock")  # not one of ipc_path's names
    not_a_socket = tmp_path / f"data-{DEAD_PID}-ba9876543210.sock"
    not_a_socket.write_text("a file someone named so")
    link = tmp_path / f"commands-{DEAD_PID}-aaaaaaaaaaaa.sock"
    link.symlink_to(dead)
    assert sockets.sweep_stale(tmp_path) == [dead.name]
    assert not dead.exists() and live.exists() and other_name.exists() and not_a_socket.exists() and link.is_symlink()
    assert sockets.sweep_stale(tmp_path) == []
    assert sockets.sweep_stale(tmp_path / "no-such-dir") == []


def test_ipc_paths_carry_this_pid_so_a_sweep_keeps_them(tmp_path):
    path = sockets.ipc_path("relay")
    match = sockets.IPC_NAME.search(path.name)
    assert match and int(match["pid"]) == os.getpid() and path.name.startswith("relay-")


def test_reaping_a_dead_supervisors_session_removes_its_client_file(tmp_path):
    run_dir = tmp_path / "notes"
    run_dir.mkdir()
    rundir.write_state(run_dir, {"status": "running", "kernel_pid": DEAD_PID, "workers": []})
    (run_dir / rundir.SESSION_CLIENT_FILE).write_text('{"socket": "/gone.sock", "key": "k"}')
    state = reap(run_dir, kill_grace=0.1)
    assert state and state["status"] == "stopped"
    assert not (run_dir / rundir.SESSION_CLIENT_FILE).exists()
    assert reap(run_dir, kill_grace=0.1)["status"] == "stopped"  # again: nothing left to remove, no error
