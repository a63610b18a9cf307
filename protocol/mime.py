"""Rich output as data: the MIME bundles session workers send (``display(...)``, ``plt.show()``, a cell's last
expression) and the checks the kernel makes before it shows one. Stdlib only (the kernel and the workers share it).

A bundle is Jupyter's: ``{mime type: value}``; text types hold a str, binary images a base64 str (as in a
notebook file), ``application/json`` any JSON value. Only the types below travel; a bundle with anything else,
a binary image that is not base64, or more than the size limit (bytes of its JSON) is refused whole: the kernel
drops it and counts it, nothing in it is executed or unpickled.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

TEXT_TYPES = ("text/plain", "text/html", "text/markdown", "text/latex", "image/svg+xml")
BINARY_TYPES = ("image/png", "image/jpeg")
JSON_TYPES = ("application/json",)
MIME_TYPES = TEXT_TYPES + BINARY_TYPES + JSON_TYPES
SOURCES = ("display", "result")  # display(...) / plt.show(), or the cell's last expression


class BundleError(ValueError):
    """A MIME bundle that cannot be shown as it is (what is wrong is the message)."""


def bundle_size(data: dict[str, Any], metadata: dict[str, Any] | None = None) -> int:
    """Bytes of the bundle as JSON: what its size limit counts."""
    return len(json.dumps([data, metadata or {}], ensure_ascii=False, allow_nan=False).encode("utf8", "replace"))


def check_bundle(data: Any, metadata: Any = None, max_bytes: int | None = None) -> None:
    """Raise ``BundleError`` unless ``data`` (and ``metadata``) is a bundle the notebook can show as it is."""
    if not isinstance(data, dict) or not data:
        raise BundleError("data is not a non-empty object of MIME type -> value")
    if metadata is not None and not isinstance(metadata, dict):
        raise BundleError("metadata is not an object")
    for mime, value in data.items():
        if mime not in MIME_TYPES:
            raise BundleError(f"MIME type {str(mime)[:80]!r} is not one nbworkers shows ({', '.join(MIME_TYPES)})")
        if mime in TEXT_TYPES and not isinstance(value, str):
            raise BundleError(f"{mime} is not a str")
        if mime in BINARY_TYPES:
            if not isinstance(value, str):
                raise BundleError(f"{mime} is not a base64 str")
            try:
                base64.b64decode(value, validate=True)
            except (binascii.Error, ValueError):
                raise BundleError(f"{mime} is not valid base64") from None
    if max_bytes is not None:
        try:
            size = bundle_size(data, metadata)
        except (TypeError, ValueError):
            raise BundleError("not JSON") from None
        if size > max_bytes:
            raise BundleError(f"{size} bytes, more than the limit of {max_bytes} (setting display_max_bytes)")


def encode_value(mime: str, value: Any) -> Any:
    """A ``_repr_*_`` / ``_repr_mimebundle_`` value as the bundle holds it (bytes of an image as base64)."""
    if mime in BINARY_TYPES and isinstance(value, (bytes, bytearray)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if mime in TEXT_TYPES and isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf8", "replace")
    return value
