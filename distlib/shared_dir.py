"""Is a checkpoint directory shared by every worker? Checked before training, so that a group on several
machines fails at once with a clear message, not at its first restart (when the workers on other machines find
no checkpoint to resume from, or each resumes from its own).

The chief writes a probe file into the directory (``tf.io.gfile``: local paths and object-store URLs alike);
every worker looks for it and says whether it read the chief's token there; the chief removes the probe.
The tokens and answers travel through TensorFlow's coordination service (``worker_facts.exchange``: no
collective op), so the check needs a MultiWorkerMirroredStrategy built first, as training does anyway; without
a coordination service (one worker, parameter servers, an evaluator) nothing is checked.
"""

from __future__ import annotations

import os
import secrets
import socket

from nbworkers.distlib.cluster import TaskInfo, task
from nbworkers.distlib.worker.mwms import worker_facts

PROBE_PREFIX = ".nbworkers-shared-probe-"


class CheckpointDirNotShared(RuntimeError):
    """Some workers cannot read what the chief writes into the checkpoint directory."""


def _read(path: str) -> str:
    import tensorflow as tf

    try:
        with tf.io.gfile.GFile(path, "r") as file:
            return str(file.read())
    except Exception:  # NotFoundError, or a file system this worker cannot reach at all
        return ""


def _write(directory: str, name: str, token: str) -> str:
    import tensorflow as tf

    tf.io.gfile.makedirs(directory)
    path = os.path.join(directory, name) if "://" not in directory else directory.rstrip("/") + "/" + name
    with tf.io.gfile.GFile(path, "w") as file:
        file.write(token)
    return path


def _remove(path: str) -> None:
    import tensorflow as tf

    try:
        tf.io.gfile.remove(path)
    except Exception:
        pass


def check_shared(directory: str | os.PathLike, info: TaskInfo | None = None) -> None:
    """Raise ``CheckpointDirNotShared`` on every worker when one of them cannot read a file the chief wrote into
    ``directory``; every worker must call it at the same point (it exchanges values with the others)."""
    info = info or task()
    if info.num_workers < 2 or info.uses_parameter_servers or info.is_evaluator:
        return
    if not worker_facts.coordination_service_available():
        return
    directory = os.fspath(directory)
    me = {"worker": info.worker_id, "host": socket.gethostname(), "address": _address(info)}
    probe_path = ""
    if info.worker_id == 0:
        token = secrets.token_hex(16)
        try:
            probe_path = _write(directory, PROBE_PREFIX + token, token)
        except Exception as error:  # the chief cannot write there: the checkpoint would fail anyway, say so now
            me["write_error"] = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
        me["probe"] = probe_path
        me["token"] = token
    first = worker_facts.exchange(me, info.worker_id, info.num_workers)
    chief = first[0]
    seen = bool(chief.get("probe")) and _read(chief["probe"]) == chief.get("token")
    answers = worker_facts.exchange({**me, "sees": seen}, info.worker_id, info.num_workers)
    if probe_path:
        _remove(probe_path)
    if chief.get("write_error"):
        raise CheckpointDirNotShared(
            f"the chief (worker 0) cannot write into the checkpoint directory {directory}: {chief['write_error']}")
    blind = [a for a in answers if not a.get("sees")]
    if blind:
        where = ", ".join(f"worker {a['worker']} (on {a['address'] or a['host']})" for a in blind)
        raise CheckpointDirNotShared(
            f"the checkpoint directory {directory} is not shared by the workers: {where} cannot read the file the"
            f" chief (worker 0, on {chief['address'] or chief['host']}) wrote there. A restarted group resumes"
            " from what the chief saved, so every worker must see it: use a folder every machine mounts (NFS, a"
            " cluster file system) or an object-store URL tf.io.gfile understands (gs://BUCKET/PATH, s3://...).")


def _address(info: TaskInfo) -> str:
    """This worker's TensorFlow address from TF_CONFIG (its machine, as the cluster knows it)."""
    for job in ("chief", "worker"):
        if info.type == job and job in info.cluster and info.index < len(info.cluster[job]):
            return info.cluster[job][info.index]
    return ""
