"""The wire of interactive sessions (``%%worker --session``): commands kernel -> workers, and the two relay
message kinds workers -> kernel. Imports neither TensorFlow nor IPython (the kernel and the workers share it).

Commands travel on a ZMQ ROUTER socket the kernel binds (``ENV_COMMANDS``); each worker connects a DEALER
with a random routing id and first sends a signed ``ready`` frame, which tells the kernel its id. Every
command is signed with the cluster's HMAC key in the Jupyter wire format (``wire.Signer``) and carries the
group's generation and a sequence number that only grows: a worker drops (and counts) any command whose
signature, generation or sequence is wrong. Commands run code in the worker, so nothing unsigned is acted on.
With ``--backend ray`` the command socket is a CurveZMQ server as the relay is, with the relay's keys
(``protocol/relay_curve.py``): a worker connects with the same server key and node client keypair as its relay
sender (``client_curve``), so only the run's nodes can connect and nobody on the path reads the cells.

Commands (``msg_type``; content fields):

- ``run``        seq, gen, cell (int), code (str), display (``"0"``: rich output from worker 0 only, or
  ``"all"``), display_max_bytes (int: the largest bundle to send; bigger ones are dropped with a note), title
  (str, optional: what the views call the cell, "cell 3" or "restore"; its tracebacks' file is
  ``<session cell 3>``: ``cell`` counts nbworkers' own cells too, the user's numbers do not)
- ``pull``       seq, gen, request (str), expression (str), max_bytes (int), data (the address of the kernel's
                 data socket), shm_path (str or None), shm_min_bytes (int): the worker sends the value there as a
                 ``pull`` data message (``session_data``: request, worker, gen, value (the tree), error (str or
                 None); the blobs as raw frames, or, local sessions, at least ``shm_min_bytes`` of them in the
                 file ``shm_path``: ``session_shm``)
- ``push``       seq, gen, values (name -> tree): a data message (``session_data``), the blobs as raw frames, or
                 in the shared-memory file ``shm_path`` (local sessions, large pushes)
- ``interrupt``  seq, gen, cell: KeyboardInterrupt in the running cell (SIGINT to the worker's main thread)
- ``pause``      seq, gen, cell: at its next training step (a distributed step call, or a report) the worker says
                 ``paused`` and waits; a worker inside a step (a distributed step call) says ``pausing`` at once: wait
                 for it, do not interrupt it
- ``resume``     seq, gen, cell, stop_at: go on, and raise KeyboardInterrupt at step number ``stop_at``
- ``abort``      seq, gen, cell, reason: abort this process's pending collective ops, then interrupt
- ``save``       seq, gen, cell, max_bytes, holder: before the kernel restarts the processes (collectives aborted,
                 a worker killed, a second Stop, Restart), save the namespace into
                 ``<run dir>/session-state/gen-<gen>/worker-<i>/`` (``distlib/saved_state/namespace.py``: models and
                 variables as tf.train.Checkpoint files on worker ``holder`` only, arrays and JSON values on each;
                 ``max_bytes`` bounds the arrays and values); the worker answers ``saved``
- ``shutdown``   seq, gen: leave the cell loop; the worker exits

The relay kind added to ``wire.KINDS``:

- ``cell``  event (``start`` | ``pausing`` | ``paused`` | ``end`` | ``saved``), cell (int); pausing, paused: step
  (training steps so far); on
  end: status (``ok`` | ``error`` | ``interrupted``), error (one line), traceback (text, bounded), aborted (bool:
  collectives were aborted in this process), step (optional int: the last training step it reported in the cell);
  on saved (the answer to ``save``): saved (list of {name, kind (``SAVED_KINDS``), detail, cell (int, optional:
  the session cell that last bound the name)}), skipped (list of
  {name, why}), dir (str: where), error (str: why nothing was saved)
- ``display`` cell (int), source (``display``: ``display(...)``/``plt.show()``; ``result``: the cell's last
  expression), data (a MIME bundle, ``protocol/mime.py``), metadata (object)

Cell output is split by marker lines the worker prints around each cell (``marker``), so the kernel gives
every line of output to the cell that printed it.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from typing import Any, Mapping

from nbworkers.protocol import env_settings, mime

ENV_SESSION = env_settings.SESSION.name  # the session's name: the worker runs the cell loop instead of one cell
ENV_COMMANDS = env_settings.COMMANDS.name  # tcp://host:port of the kernel's command socket

COMMANDS = ("ready", "run", "pull", "push", "interrupt", "pause", "resume", "abort", "save", "shutdown")
CELL_EVENTS = ("start", "end", "pausing", "paused", "saved")
STATE_DIR = "session-state"  # in the run directory: what workers saved before a restart (distlib/saved_state/)
SAVED_KINDS = ("model", "variable", "checkpoint", "array", "value")  # what a saved name is (``saved`` event)
SAVE_MAX_BYTES = 2**30  # the arrays and JSON values one worker saves at most (models and variables: no limit)
MAX_SAVED_ENTRIES = 2000  # names in one ``saved`` report (more are cut: the worker's manifest keeps them all)
CELL_STATUSES = ("ok", "error", "interrupted")
MAX_TRACEBACK_CHARS = 20_000  # of a failed cell's traceback sent to the kernel (the log keeps it whole)
MARKER = re.compile(r"^--- nbworkers: cell (\d+) (start|end) ---\r?\n", re.M)
# The line a worker prints when saved state was put back into the names a cell built again (at the cell's end, over
# what its code made: distlib/saved_state/namespace.py); the kernel says it in that cell's view (sessions/cell.py)
RESTORED = "nbworkers: restored "


def marker(cell: int, event: str) -> str:
    """The line a worker prints before (``start``) and after (``end``) a cell's output."""
    return f"--- nbworkers: cell {cell} {event} ---\n"


def client_curve(env: Mapping[str, str]) -> tuple[str, str, str] | None:
    """(server public, client public, client secret) of the command socket, the relay's (``wire.Sender``): set
    when the relay is encrypted (``--backend ray``; the client keypair was made on this node), else None."""
    server, public, secret = (env_settings.RELAY_SERVERKEY.name, env_settings.RELAY_CLIENTKEY.name,
                              env_settings.RELAY_CLIENTSECRET.name)
    if not env.get(server):
        return None
    return env[server], env.get(public, ""), env.get(secret, "")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def validate(kind: str, content: dict[str, Any]) -> str | None:
    """The ``cell`` and ``display`` relay kinds' own fields (``wire.validate`` checked worker and gen)."""
    if kind == "cell":
        if content.get("event") not in CELL_EVENTS:
            return f"unknown cell event {content.get('event')!r}"
        if not _is_int(content.get("cell")) or content["cell"] < 1:
            return "cell is not a positive int"
        if content["event"] in ("pausing", "paused") and not _is_int(content.get("step")):
            return "step is not an int"
        if content["event"] == "end":
            if content.get("status") not in CELL_STATUSES:
                return f"unknown cell status {content.get('status')!r}"
            for name in ("error", "traceback"):
                if not isinstance(content.get(name, ""), str):
                    return f"{name} is not a str"
            if not isinstance(content.get("aborted", False), bool):
                return "aborted is not a bool"
            if content.get("step") is not None and not _is_int(content["step"]):
                return "step is not an int"
        if content["event"] == "saved":
            return _saved_problem(content)
        return None
    if kind == "display":
        if not _is_int(content.get("cell")) or content["cell"] < 1:
            return "cell is not a positive int"
        if content.get("source") not in mime.SOURCES:
            return f"unknown display source {content.get('source')!r}"
        try:
            mime.check_bundle(content.get("data"), content.get("metadata"))
        except mime.BundleError as error:
            return str(error)
        return None
    return f"not a session kind: {kind!r}"


def _saved_problem(content: dict[str, Any]) -> str | None:
    """What is wrong with a ``saved`` event's fields (None: nothing): only plain strings and lists of small dicts."""
    for name in ("dir", "error"):
        if not isinstance(content.get(name, ""), str):
            return f"{name} is not a str"
    for field, keys in (("saved", ("name", "kind", "detail")), ("skipped", ("name", "why"))):
        entries = content.get(field, [])
        if not isinstance(entries, list) or len(entries) > MAX_SAVED_ENTRIES:
            return f"{field} is not a list of at most {MAX_SAVED_ENTRIES} entries"
        for entry in entries:
            if not isinstance(entry, dict) or not all(isinstance(entry.get(key), str) for key in keys):
                return f"a {field} entry is not a dict of strings {keys}"
            if field == "saved" and entry["kind"] not in SAVED_KINDS:
                return f"unknown saved kind {entry['kind']!r}"
            if field == "saved" and not isinstance(entry.get("cell", 0), int):
                return "a saved entry's cell is not an int"
    return None


def verify(frames: list[bytes], key: str | bytes) -> tuple[str, dict[str, Any]] | None:
    """``(kind, content)`` of a command signed with ``key`` in ``wire.Signer``'s format, or None when the
    signature or the framing is wrong. Only JSON is parsed, and only after the signature checked out."""
    try:
        at = frames.index(b"<IDS|MSG>")
    except ValueError:
        return None
    parts = frames[at + 1:]
    if len(parts) < 5:  # a data message's blobs follow (session_data checks them)
        return None
    signature, header, parent, metadata, content = parts[:5]
    digest = hmac.new(key.encode("ascii") if isinstance(key, str) else key, digestmod=hashlib.sha256)
    for part in (header, parent, metadata, content):
        digest.update(part)
    if not hmac.compare_digest(digest.hexdigest().encode("ascii"), signature):
        return None
    try:
        kind = json.loads(header)["msg_type"]
        body = json.loads(content)
    except (ValueError, KeyError, TypeError):
        return None
    if kind not in COMMANDS or not isinstance(body, dict):
        return None
    return kind, body
