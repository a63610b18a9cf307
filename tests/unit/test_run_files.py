"""Run names, the run root's check, the worker's own-file opening and push.pkl's signature: pure, no kernel,
no TensorFlow, no subprocess."""

from __future__ import annotations

import os
import pickle
import stat
from pathlib import Path

import pytest

from nbworkers.magics.launch.names import valid_name
from nbworkers.magics.rundir import layout as rundir
from nbworkers.protocol.private import files as own_files
from nbworkers.protocol.private.dirs import UnsafeDirectory, owned_root

KEY = "ab" * 32


@pytest.mark.parametrize("name", ["good", "brisk-heron-2", "a.b_c", "A" * 64])
def test_names_that_are_fine(name):
    assert valid_name(name)


@pytest.mark.parametrize("name", ["good\n", "\ngood", "good\nbad", "a/b", "/abs", "..", "a..b", ".hidden", "-x",
                                  "", "A" * 65, "tab\there", "nul\0", "é"])
def test_names_with_newlines_slashes_dots_and_more_are_refused(name):
    assert not valid_name(name)


def test_a_missing_run_root_is_made_private_with_its_parents_whatever_the_umask(tmp_path):
    old = os.umask(0o002)  # user-private groups: new folders would be group-writable
    try:
        root = rundir.checked_run_root(tmp_path / "deep" / "runs")
    finally:
        os.umask(old)
    assert root.is_dir() and stat.S_IMODE(root.stat().st_mode) == 0o700
    assert stat.S_IMODE(root.parent.stat().st_mode) == 0o700


@pytest.mark.parametrize("mode", [0o777, 0o775, 0o757, 0o1777])
def test_a_run_root_others_can_write_is_refused_with_its_name_and_the_fix(tmp_path, mode):
    root = tmp_path / "shared-runs"
    root.mkdir()
    root.chmod(mode)
    with pytest.raises(rundir.UnsafeRunRoot) as caught:
        rundir.checked_run_root(root)
    message = str(caught.value)
    assert str(root) in message and f"chmod 700 {root}" in message and "NBWORKERS_RUN_ROOT" in message
    with pytest.raises(rundir.UnsafeRunRoot):
        rundir.list_run_dirs(root)  # listings refuse it too
    root.chmod(0o755)  # readable by others, writable by us alone: accepted
    assert rundir.checked_run_root(root) == root


def test_a_symlinked_run_root_is_refused(tmp_path):
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    link = tmp_path / "runs"
    link.symlink_to(real, target_is_directory=True)
    with pytest.raises(rundir.UnsafeRunRoot, match="symlink"):
        rundir.checked_run_root(link)


def test_a_run_root_inside_a_folder_others_can_write_is_refused(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # no sticky bit: anyone may rename runs/ and put theirs in its place
    (shared / "runs").mkdir(mode=0o700)
    with pytest.raises(rundir.UnsafeRunRoot, match="sticky"):
        rundir.checked_run_root(shared / "runs")
    shared.chmod(0o1777)  # like /tmp: only an entry's owner may rename it
    assert rundir.checked_run_root(shared / "runs") == shared / "runs"


@pytest.mark.skipif(os.getuid() != 0, reason="giving a folder to another user needs root (CI runs as root)")
def test_a_run_root_of_another_user_is_refused(tmp_path):
    root = tmp_path / "theirs"
    root.mkdir(mode=0o700)
    os.chown(root, 65534, 65534)  # nobody
    with pytest.raises(UnsafeDirectory, match="belongs to user id 65534"):
        owned_root(root)


def test_open_own_refuses_symlinks_and_what_is_not_a_regular_file(tmp_path):
    target = tmp_path / "elsewhere.py"
    target.write_text("print('not the cell')\n")
    link = tmp_path / "cell.py"
    link.symlink_to(target)
    with pytest.raises(own_files.UnsafeFile, match="symlink"):
        own_files.read_own(link)
    with pytest.raises(own_files.UnsafeFile, match="not a regular file"):
        own_files.read_own(tmp_path)
    assert own_files.read_own(target) == b"print('not the cell')\n"


def test_a_signed_push_round_trips_and_any_change_is_refused():
    payload = pickle.dumps({"x": 41})
    signed = own_files.sign_push(KEY, payload)
    assert own_files.verify_push(KEY, signed) == payload
    tampered = signed[:-1] + bytes([signed[-1] ^ 1])
    for bad, why in [(payload, "no signature"), (tampered, "do not carry this run's signature"),
                     (own_files.sign_push("cd" * 32, payload), "do not carry this run's signature"),
                     (b"", "no signature")]:
        with pytest.raises(own_files.BadPushSignature, match=why):
            own_files.verify_push(KEY, bad)
    with pytest.raises(own_files.BadPushSignature, match="no run key"):
        own_files.verify_push("", signed)


def test_the_run_directory_layout_names_the_tensorboard_socket_file(tmp_path):
    assert rundir.tensorboard_socket_file(tmp_path) == Path(tmp_path) / "tensorboard.socket"


def test_a_socket_path_too_long_for_a_unix_socket_goes_under_tmp(tmp_path, monkeypatch):
    """A deep $TMPDIR (pytest's, macOS's) left no room for the relay's socket name: ZMQ refused to bind it."""
    from nbworkers.protocol.private import dirs as private_dirs

    deep = tmp_path / ("d" * 60) / ("e" * 40)
    deep.mkdir(parents=True, mode=0o700)
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setattr(private_dirs.tempfile, "gettempdir", lambda: str(deep))
    name = "relay-123456-0123456789ab.sock"
    assert len(str(private_dirs.runtime_dir("nbworkers-test-ipc") / name)) > private_dirs.UNIX_SOCKET_PATH_MAX
    path = private_dirs.socket_path("nbworkers-test-ipc", name)
    assert len(str(path)) <= private_dirs.UNIX_SOCKET_PATH_MAX and str(path).startswith("/tmp/")
    assert (path.parent.stat().st_mode & 0o777) == 0o700
    path.parent.rmdir()
