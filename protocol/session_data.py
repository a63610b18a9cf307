"""How a session's data travels (``push``, ``scatter``, ``pull``): one signed JSON message plus raw binary frames.

A data message is the Jupyter wire format with buffers: ``<IDS|MSG>``, the HMAC-SHA256 signature, header,
parent, metadata, content, then one frame per blob (``.npy`` files, or pickles for ``push(allow_pickle=True)``).
The signature covers the JSON parts; the content names every blob's size (``blobs``) and a MAC of the blobs in
order (``mac``), so the signature covers the payload without base64 and without a second pass of HMAC-SHA256.
The MAC is Poly1305 (``cryptography``, OpenSSL's) under a one-time key derived from the session's key and a
random nonce sent in the content (``HMAC-SHA256(key, "nbworkers-data" + nonce)``, as ChaCha20-Poly1305 derives
one per message): a forger who does not hold the key cannot make a payload match a signed tag, and Poly1305
runs at several GB/s where SHA-256 runs near 1 GB/s on this project's machine — hashing twice (sender and
receiver) at SHA-256's speed would halve the rate.
Local sessions put the blobs of a large message in a private shared-memory file instead (``session_shm``): the
content then says ``shm`` (the file's size) and ``blobs`` (each blob's), no MAC, and no frame follows the six.
The frames are sent and received without copies (``send(..., copy=False)``, ``recv(copy=False)``): the
receiver checks the MAC over the frames' memory and numpy reads the arrays from it (``np.frombuffer``).

``pack`` builds the frames; ``unpack`` checks them — frame count, signature, sizes against ``max_bytes``, MAC —
before anything but the signed JSON is looked at, and raises ``DataError`` saying what was wrong.
Imports neither TensorFlow nor the kernel side (both sides use it).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
from typing import Any, Callable, Sequence

from nbworkers.protocol import wire

DELIM = wire.Signer.DELIM
SIGNED_FRAMES = 6  # <IDS|MSG>, signature, header, parent, metadata, content
MAX_BLOBS = 10_000  # arrays in one value
SHM = "shm"  # content field of a message whose blobs are in a shared-memory file (session_shm): its size
MAX_JSON_BYTES = 1 << 20  # the signed JSON parts of one data message (the value's tree, without its arrays)

Buffer = bytes | memoryview


class DataError(ValueError):
    """A data message was refused: unsigned, malformed, larger than allowed, or its payload does not match."""


def mac(key: str | bytes, nonce: str, blobs: Sequence[Any]) -> str:
    """Poly1305 tag (hex) of the blobs in order (buffers: bytes, memoryview, zmq.Frame) under the one-time key of
    ``nonce``."""
    from cryptography.hazmat.primitives.poly1305 import Poly1305  # lazily: only when data moves

    secret = key.encode("ascii") if isinstance(key, str) else key
    one_time = hmac.new(secret, b"nbworkers-data" + nonce.encode("ascii"), hashlib.sha256).digest()
    tagger = Poly1305(one_time)
    for blob in blobs:
        tagger.update(blob)
    return tagger.finalize().hex()


def pack(key: str | bytes, signer: wire.Signer, kind: str, content: dict[str, Any],
         blobs: Sequence[Any]) -> list[Any]:
    """The frames of one data message: ``signer``'s six (``signer`` signs with ``key``), then the blobs as they
    are (not copied)."""
    nonce = secrets.token_hex(16)
    content = {**content, "blobs": [_nbytes(b) for b in blobs], "nonce": nonce, "mac": mac(key, nonce, blobs)}
    return [*signer.frames(kind, content), *blobs]


def pack_offer(signer: wire.Signer, kind: str, content: dict[str, Any], sizes: Sequence[int]) -> list[Any]:
    """The frames of a data message whose blobs (``sizes`` bytes each) are in a shared-memory file
    (``session_shm``): the six signed ones, with ``shm`` = the file's size."""
    return signer.frames(kind, {**content, "blobs": list(sizes), SHM: sum(sizes)})


Opener = Callable[[dict[str, Any], int | None], memoryview]  # (content, size; None: only remove the file)


def unpack(frames: Sequence[Any], key: str | bytes, max_bytes: int,
           open_shm: Opener | None = None) -> tuple[str, dict[str, Any], list[memoryview]]:
    """``(kind, content, blobs)`` of a data message signed with ``key``; the blobs are views of the frames, or of
    the shared-memory file ``open_shm(content, size)`` maps (only where one is expected: ``open_shm`` given)."""
    if len(frames) < SIGNED_FRAMES or len(frames) > SIGNED_FRAMES + MAX_BLOBS:
        raise DataError(f"{len(frames)} frames: not a data message")
    if sum(memoryview(f).nbytes for f in frames[:SIGNED_FRAMES]) > MAX_JSON_BYTES:
        raise DataError(f"its JSON is larger than {MAX_JSON_BYTES} bytes: put large data in numpy arrays")
    kind, content = _signed_json(frames, key)
    if SHM in content:
        if len(frames) != SIGNED_FRAMES:
            raise DataError("it offers shared memory and frames at once")
        return kind, content, _offered_blobs(content, max_bytes, open_shm)
    blobs = [memoryview(f) for f in frames[SIGNED_FRAMES:]]
    _sizes(content, [b.nbytes for b in blobs], max_bytes)
    nonce, tag = content.get("nonce"), content.get("mac")
    if (not isinstance(nonce, str) or not nonce.isascii() or len(nonce) > 64 or not isinstance(tag, str)
            or not hmac.compare_digest(tag, mac(key, nonce, blobs))):
        raise DataError("its data does not match the signed MAC")
    return kind, content, blobs


def _offered_blobs(content: dict[str, Any], max_bytes: int, open_shm: Opener | None) -> list[memoryview]:
    """The blobs of a shared-memory offer: its sizes and the limit checked before the file is mapped; a refused
    offer's file is removed all the same (``open_shm(content, None)``)."""
    from nbworkers.protocol import session_shm

    if open_shm is None:
        raise DataError("it offers shared memory where none is expected (only local sessions use it)")
    try:
        declared = content.get(SHM)
        if not isinstance(declared, int) or isinstance(declared, bool) or declared < 0:
            raise DataError("its shared-memory size is not a count of bytes")
        sizes = _sizes(content, None, max_bytes)
        if sum(sizes) != declared:
            raise DataError(f"its blobs ({sum(sizes)} bytes) do not add up to the shared memory it declares "
                            f"({declared} bytes)")
    except DataError:
        try:
            open_shm(content, None)
        except session_shm.ShmError:
            pass  # not a name of ours: nothing of ours to remove
        raise
    try:
        return session_shm.split(open_shm(content, declared), sizes)
    except session_shm.ShmError as error:
        raise DataError(f"its shared memory was refused: {error}") from None


def _sizes(content: dict[str, Any], actual: list[int] | None, max_bytes: int) -> list[int]:
    """The blob sizes the signed content announces, checked against ``actual`` (the frames') and ``max_bytes``."""
    sizes = content.get("blobs")
    if (not isinstance(sizes, list) or len(sizes) > MAX_BLOBS
            or any(not isinstance(n, int) or isinstance(n, bool) or n < 0 for n in sizes)
            or (actual is not None and actual != sizes)):
        raise DataError("its blobs do not match the sizes it announces")
    total = sum(sizes)
    if total > max_bytes:
        raise DataError(f"{total} bytes of data, more than the limit ({max_bytes} bytes)")
    return sizes


def _signed_json(frames: Sequence[Any], key: str | bytes) -> tuple[str, dict[str, Any]]:
    """``(kind, content)`` of the six signed frames, after checking the signature."""
    if len(frames) < SIGNED_FRAMES:
        raise DataError(f"{len(frames)} frames: not a data message")
    head = [bytes(f) for f in frames[:SIGNED_FRAMES]]
    if head[0] != DELIM:
        raise DataError("not a data message (no <IDS|MSG>)")
    signature = hmac.new(key.encode("ascii") if isinstance(key, str) else key, digestmod=hashlib.sha256)
    for part in head[2:]:
        signature.update(part)
    if not hmac.compare_digest(signature.hexdigest().encode("ascii"), head[1]):
        raise DataError("bad signature")
    try:
        kind = json.loads(head[2])["msg_type"]
        content = json.loads(head[5])
    except (ValueError, KeyError, TypeError):
        raise DataError("undecodable JSON") from None
    if not isinstance(kind, str) or not isinstance(content, dict):
        raise DataError("undecodable JSON")
    return kind, content


def _nbytes(blob: Any) -> int:
    return memoryview(blob).nbytes
