"""What a kernel killed with ``kill -9`` leaves in shared memory, removed at the next load
(``session_shm.sweep_stale``, called by ``leftovers.scan_at_load``): the files of its channels in
``/dev/shm/nbworkers-data-<uid>``, and the fall-back folder ``dirs.runtime_dir`` made when that folder was squatted;
never a live kernel's, another machine's, another user's (the squatter's folder) or anything reached through a link.
A fake ``/dev/shm`` (mode 1777) in a temp folder; another user's files are real ``chown``s (the tests run as root).
A squatted folder and a killed process for real: tests/integration/test_shm_leftovers.py."""

from __future__ import annotations

import os
import pwd
from pathlib import Path

import pytest

from nbworkers.protocol import session_shm
from nbworkers.protocol.private import dirs
from nbworkers.protocol.private.machine import key_of, machine_key

DEAD_PID = 2 ** 22 + 7  # above Linux's largest pid_max: no process has it
HERE, OTHER = machine_key(), key_of("another-machine", "boot")
TOKEN = "0123456789abcdef0123456789abcdef"
as_root = pytest.mark.skipif(os.getuid() != 0, reason="another user's files need root to make")


def name(machine: str, pid: int, what: str = "push") -> str:
    return f"a1b2c3d4e5f6.{machine}.{pid}-{what}-{TOKEN}"


@pytest.fixture
def shm(tmp_path) -> Path:
    base = tmp_path / "shm"
    base.mkdir()
    base.chmod(0o1777)
    return base


def own_folder(shm: Path) -> Path:
    folder = shm / f"nbworkers-data-{os.getuid()}"
    folder.mkdir(mode=0o700)
    return folder


def test_a_dead_kernels_files_go_and_live_or_other_machines_files_stay(shm):
    folder = own_folder(shm)
    dead = [folder / name(HERE, DEAD_PID), folder / name(HERE, DEAD_PID, "pull")]
    live = folder / name(HERE, os.getpid())
    theirs = folder / name(OTHER, DEAD_PID)  # another machine's, on a shared runtime folder
    older = folder / f"a1b2c3d4e5f6-push-{TOKEN}"  # an older version's name: no maker in it
    other_name = folder / "notes.txt"
    for path in (*dead, live, theirs, older, other_name):
        path.write_bytes(b"x")
    link = folder / name(HERE, DEAD_PID + 1)
    link.symlink_to(other_name)
    removed = session_shm.sweep_stale(str(shm))
    assert sorted(removed) == sorted(f"{folder}/{p.name}" for p in dead)
    assert all(p.exists() for p in (live, theirs, older, other_name)) and link.is_symlink()
    assert session_shm.sweep_stale(str(shm)) == []


def test_channel_names_carry_this_machine_and_pid(tmp_path):
    files = session_shm.ShmFiles(tmp_path)
    match = session_shm.NAME.match(files.path("push").name)
    assert match and match["machine"] == HERE and int(match["pid"]) == os.getpid()
    # a worker's pull reply reuses the kernel's prefix (distlib/worker/session.py): its maker is the kernel
    assert session_shm.ShmFiles(tmp_path, files.prefix).path("pull").name.startswith(files.prefix + "-pull-")


def test_a_dead_makers_fall_back_folder_goes_whole_a_live_ones_stays(shm):
    uid = os.getuid()
    dead = shm / f"nbworkers-data-{uid}-{HERE}-{DEAD_PID}-abc_123x"
    live = shm / f"nbworkers-data-{uid}-{HERE}-{os.getpid()}-abc_123y"
    theirs = shm / f"nbworkers-data-{uid}-{OTHER}-{DEAD_PID}-abc_123z"
    for folder in (dead, live, theirs):
        folder.mkdir(mode=0o700)
        (folder / name(HERE, DEAD_PID)).write_bytes(b"x")
    (dead / "anything").write_bytes(b"y")
    removed = session_shm.sweep_stale(str(shm))
    assert removed == [dead.name] and not dead.exists()
    assert (live / name(HERE, DEAD_PID)).exists()  # a live maker's folder is its own: not looked into
    assert theirs.is_dir() and (theirs / name(HERE, DEAD_PID)).exists()


def test_this_process_names_its_fall_back_folder_for_the_sweep(shm, monkeypatch):
    monkeypatch.setattr(dirs, "_fallbacks", {})
    squatted = shm / f"nbworkers-data-{os.getuid()}"
    squatted.mkdir(mode=0o755)  # open to others: refused, as another user's would be
    made = dirs.runtime_dir("nbworkers-data", base=shm)
    match = session_shm.FALLBACK.match(made.name)
    assert made.parent == shm and match and match["machine"] == HERE and int(match["pid"]) == os.getpid()
    assert session_shm.sweep_stale(str(shm)) == [] and made.is_dir()  # its maker (this process) lives


@as_root
def test_another_users_folders_and_files_are_never_touched(shm):
    nobody = pwd.getpwnam("nobody").pw_uid
    squatted = shm / f"nbworkers-data-{os.getuid()}"  # the squatter's folder, under our folder's name
    squatted.mkdir(mode=0o700)
    (squatted / name(HERE, DEAD_PID)).write_bytes(b"theirs")
    os.chown(squatted / name(HERE, DEAD_PID), nobody, -1)
    os.chown(squatted, nobody, -1)
    posing = shm / f"nbworkers-data-{os.getuid()}-{HERE}-{DEAD_PID}-posing12"  # a fall-back's name, theirs
    posing.mkdir(mode=0o700)
    (posing / "file").write_bytes(b"theirs")
    os.chown(posing, nobody, -1)
    linked = shm / f"nbworkers-data-{os.getuid()}-{HERE}-{DEAD_PID}-linked12"
    linked.symlink_to(posing)
    assert session_shm.sweep_stale(str(shm)) == []
    assert (squatted / name(HERE, DEAD_PID)).exists() and (posing / "file").exists() and linked.is_symlink()


@as_root
def test_in_our_folder_another_users_file_with_a_dead_makers_name_stays(shm):
    folder = own_folder(shm)
    theirs = folder / name(HERE, DEAD_PID)
    theirs.write_bytes(b"x")
    os.chown(theirs, pwd.getpwnam("nobody").pw_uid, -1)
    assert session_shm.sweep_stale(str(shm)) == [] and theirs.exists()
