"""A local session's shared-memory data path (``protocol/session_shm.py`` and its part of ``session_data``): the
file's checks (owner, mode, links, size, symlink, missing), that a refused offer leaves no file, and the channels'
sweep. Real files in a private temp directory; the bad owner is a real chown (the tests run as root)."""

from __future__ import annotations

import os

import numpy as np
import pytest

from nbworkers.protocol import session_data, session_shm, session_values, wire


@pytest.fixture()
def files(tmp_path):
    folder = tmp_path / "shm"
    folder.mkdir(mode=0o700)
    return session_shm.ShmFiles(folder)


def offer(files, blobs, key="k" * 64):
    """A push as the kernel sends it: the file written, the six signed frames naming it."""
    path = files.path("push")
    session_shm.write(path, blobs)
    sizes = [memoryview(b).nbytes for b in blobs]
    frames = session_data.pack_offer(wire.Signer(key), "push", {"values": {"x": {"__nbw__": "array", "blob": 0}},
                                                                "shm_path": str(path)}, sizes)
    return path, frames


def test_an_array_goes_through_the_file_and_comes_back_as_a_read_only_view(files):
    array = np.arange(3 * 2**18, dtype=np.float32).reshape(3, -1)
    tree, blobs = session_values.encode({"x": array})
    path, frames = offer(files, blobs)
    assert oct(os.stat(path).st_mode & 0o777) == "0o600" and len(frames) == session_data.SIGNED_FRAMES
    _, content, views = session_data.unpack(frames, "k" * 64, max_bytes=1 << 30, open_shm=session_shm.open_named)
    assert not path.exists() and files.left() == []  # unlinked as soon as it was opened
    back = session_values.decode(tree, views)["x"]
    assert np.array_equal(back, array) and not back.flags.writeable
    del views
    assert back.sum() == array.sum()  # the array keeps its mapping alive


def test_a_missing_file_is_refused_clearly(files):
    path, frames = offer(files, [b"abc"])
    os.unlink(path)
    with pytest.raises(session_data.DataError, match="is missing"):
        session_data.unpack(frames, "k" * 64, 1 << 20, session_shm.open_named)


def test_a_size_other_than_declared_is_refused_and_removed(files):
    path, frames = offer(files, [b"abc"])
    with open(path, "ab") as grown:
        grown.write(b"more")
    with pytest.raises(session_data.DataError, match="holds 7 bytes, not the 3"):
        session_data.unpack(frames, "k" * 64, 1 << 20, session_shm.open_named)
    assert not path.exists()


def test_a_file_open_to_others_is_refused(files):
    path, frames = offer(files, [b"abc"])
    os.chmod(path, 0o644)
    with pytest.raises(session_data.DataError, match="open to other users"):
        session_data.unpack(frames, "k" * 64, 1 << 20, session_shm.open_named)
    assert not path.exists()


@pytest.mark.skipif(os.getuid() != 0, reason="a file of another owner needs root to make")
def test_a_file_of_another_user_is_refused(files):
    path, frames = offer(files, [b"abc"])
    os.chown(path, 65534, 65534)
    with pytest.raises(session_data.DataError, match="belongs to user id 65534"):
        session_data.unpack(frames, "k" * 64, 1 << 20, session_shm.open_named)
    assert not path.exists()


def test_a_symlink_or_a_second_link_is_refused(files, tmp_path):
    target = tmp_path / "elsewhere"
    target.write_bytes(b"abc")
    path, frames = offer(files, [b"abc"])
    os.unlink(path)
    os.symlink(target, path)
    with pytest.raises(session_data.DataError, match="is a symlink"):
        session_data.unpack(frames, "k" * 64, 1 << 20, session_shm.open_named)
    assert not os.path.lexists(path) and target.read_bytes() == b"abc"  # the link went, not what it named
    path, frames = offer(files, [b"abc"])
    os.link(path, tmp_path / "second")
    with pytest.raises(session_data.DataError, match="has 2 links"):
        session_data.unpack(frames, "k" * 64, 1 << 20, session_shm.open_named)


def test_over_the_cap_or_sizes_that_do_not_add_up_are_refused_before_mapping_and_removed(files):
    path, frames = offer(files, [b"abc", b"defg"])
    with pytest.raises(session_data.DataError, match="more than the limit"):
        session_data.unpack(frames, "k" * 64, 5, session_shm.open_named)
    assert not path.exists()
    path, _ = offer(files, [b"abc"])
    forged = wire.Signer("k" * 64).frames("push", {"shm_path": str(path), "blobs": [1, 1], "shm": 3})
    with pytest.raises(session_data.DataError, match="do not add up"):
        session_data.unpack(forged, "k" * 64, 1 << 20, session_shm.open_named)
    assert not path.exists()


def test_an_offer_is_refused_where_none_is_expected_or_unsigned_or_outside_the_names(files):
    path, frames = offer(files, [b"abc"])
    with pytest.raises(session_data.DataError, match="none is expected"):
        session_data.unpack(frames, "k" * 64, 1 << 20)  # a Ray session's socket
    with pytest.raises(session_data.DataError, match="bad signature"):
        session_data.unpack(frames, "j" * 64, 1 << 20, session_shm.open_named)
    outside = wire.Signer("k" * 64).frames("push", {"shm_path": "/etc/passwd", "blobs": [3], "shm": 3})
    with pytest.raises(session_data.DataError, match="not a shared-memory file name"):
        session_data.unpack(outside, "k" * 64, 1 << 20, session_shm.open_named)
    with pytest.raises(session_data.DataError, match="offers shared memory and frames"):
        session_data.unpack([*frames, b"abc"], "k" * 64, 1 << 20, session_shm.open_named)


def test_a_file_in_a_folder_open_to_others_is_refused(tmp_path):
    folder = tmp_path / "open"
    folder.mkdir(mode=0o755)
    os.chmod(folder, 0o755)
    path, frames = offer(session_shm.ShmFiles(folder), [b"abc"])
    with pytest.raises(session_data.DataError, match="open to other users"):
        session_data.unpack(frames, "k" * 64, 1 << 20, session_shm.open_named)


def test_write_is_exclusive_and_the_sweep_removes_only_the_channels_own_files(files):
    path = files.path("pull", "a" * 32)
    session_shm.write(path, [b"x"])
    with pytest.raises(FileExistsError):
        session_shm.write(path, [b"y"])
    other = session_shm.ShmFiles(files.folder)
    session_shm.write(other.path("push"), [b"z"])
    session_shm.write(files.path("push"), [b"z"])
    assert files.sweep() == 2 and files.left() == [] and len(other.left()) == 1
    with pytest.raises(session_shm.ShmError):
        files.path("pull", "../../etc")


def test_the_folder_is_private_and_on_memory_when_dev_shm_is_there():
    folder = session_shm.data_dir()
    assert oct(os.stat(folder).st_mode & 0o777) == "0o700" and os.stat(folder).st_uid == os.getuid()
    if os.path.isdir("/dev/shm"):
        assert str(folder).startswith("/dev/shm/")


def test_a_write_leaves_an_unnamed_spare_that_the_next_write_fills_and_names(files):
    first = files.path("push")
    files.write(first, [b"a" * 5000])
    assert wait_for(lambda: files._spare is not None)  # made in a thread, unnamed: not in the folder
    assert [p.name for p in files.left()] == [first.name]
    second, spare_inode = files.path("pull"), os.fstat(files._spare[0]).st_ino
    files.write(second, [b"hello ", b"world"])
    assert os.stat(second).st_ino == spare_inode  # the spare, now named
    assert second.read_bytes() == b"hello world" and oct(os.stat(second).st_mode & 0o777) == "0o600"
    assert os.stat(second).st_nlink == 1
    files.sweep(close=True)
    assert files.left() == [] and wait_for(lambda: files._spare is None)


def wait_for(condition, seconds=10.0):
    import time

    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True
