"""How a session's data travels (``push``, ``scatter``, ``pull``): one signed JSON message plus raw binary frames.

A data message is the Jupyter wire format with buffers: ``<IDS|MSG>``, the HMAC-SHA256 signature, header,
parent, metadata, content, then one frame per blob (``.npy`` files, or pickles for ``push(allow_pickle=True)``).
The signature covers the JSON parts; the content names every blob's size (``blobs``) and the SHA-256 of the
blobs in order (``sha256``), so the signature covers the payload without base64 and without signing it twice.
The frames are sent and received without copies (``send(..., copy=False)``, ``recv(copy=False)``): the
receiver checks the digest over the frames' memory and numpy reads the arrays from it (``np.frombuffer``).

``pack`` builds the frames; ``unpack`` checks them — frame count, signature, sizes against ``max_bytes``, digest —
before anything but the signed JSON is looked at, and raises ``DataError`` saying what was wrong.
Imports neither TensorFlow nor the kernel side (both sides use it).
"""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any, Sequence

from nbworkers.protocol import wire

DELIM = wire.Signer.DELIM
SIGNED_FRAMES = 6  # <IDS|MSG>, signature, header, parent, metadata, content
MAX_BLOBS = 10_000  # arrays in one value
MAX_JSON_BYTES = 1 << 20  # the signed JSON parts of one data message (the value's tree, without its arrays)

Buffer = bytes | memoryview


class DataError(ValueError):
    """A data message was refused: unsigned, malformed, larger than allowed, or its payload does not match."""


def digest(blobs: Sequence[Any]) -> str:
    """SHA-256 (hex) of the blobs in order (a buffer each: bytes, memoryview, zmq.Frame)."""
    hasher = hashlib.sha256()
    for blob in blobs:
        hasher.update(blob)
    return hasher.hexdigest()


def pack(signer: wire.Signer, kind: str, content: dict[str, Any], blobs: Sequence[Any]) -> list[Any]:
    """The frames of one data message: ``signer``'s six, then the blobs as they are (not copied)."""
    content = {**content, "blobs": [_nbytes(b) for b in blobs], "sha256": digest(blobs)}
    return [*signer.frames(kind, content), *blobs]


def unpack(frames: Sequence[Any], key: str | bytes, max_bytes: int) -> tuple[str, dict[str, Any], list[memoryview]]:
    """``(kind, content, blobs)`` of a data message signed with ``key``; the blobs are views of the frames."""
    if len(frames) < SIGNED_FRAMES or len(frames) > SIGNED_FRAMES + MAX_BLOBS:
        raise DataError(f"{len(frames)} frames: not a data message")
    if sum(memoryview(f).nbytes for f in frames[:SIGNED_FRAMES]) > MAX_JSON_BYTES:
        raise DataError(f"its JSON is larger than {MAX_JSON_BYTES} bytes: put large data in numpy arrays")
    head = [bytes(f) for f in frames[:SIGNED_FRAMES]]
    if head[0] != DELIM:
        raise DataError("not a data message (no <IDS|MSG>)")
    mac = hmac.new(key.encode("ascii") if isinstance(key, str) else key, digestmod=hashlib.sha256)
    for part in head[2:]:
        mac.update(part)
    if not hmac.compare_digest(mac.hexdigest().encode("ascii"), head[1]):
        raise DataError("bad signature")
    try:
        kind = json.loads(head[2])["msg_type"]
        content = json.loads(head[5])
    except (ValueError, KeyError, TypeError):
        raise DataError("undecodable JSON") from None
    if not isinstance(kind, str) or not isinstance(content, dict):
        raise DataError("undecodable JSON")
    blobs = [memoryview(f) for f in frames[SIGNED_FRAMES:]]
    sizes = content.get("blobs")
    if (not isinstance(sizes, list) or len(sizes) != len(blobs)
            or any(not isinstance(n, int) or isinstance(n, bool) for n in sizes)
            or [b.nbytes for b in blobs] != sizes):
        raise DataError("its blobs do not match the sizes it announces")
    total = sum(sizes)
    if total > max_bytes:
        raise DataError(f"{total} bytes of data, more than the limit ({max_bytes} bytes)")
    if not isinstance(content.get("sha256"), str) or not hmac.compare_digest(content["sha256"], digest(blobs)):
        raise DataError("its data does not match the signed digest")
    return kind, content, blobs


def _nbytes(blob: Any) -> int:
    return memoryview(blob).nbytes
