"""The prebuilt sidebar (``extension/labextension``) records a hash of the sources it was built from.

    python tools/labextension_stamp.py --write   # after a build (``make labextension`` runs it)
    python tools/labextension_stamp.py           # exit 1 when the sources changed since the last build

The built JavaScript is committed (``pip install .`` and ``make setup`` need no node); this hash is how the
tests notice a source change that was not rebuilt.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SOURCE_DIR = REPO / "labextension"
STAMP = REPO / "extension" / "labextension" / "sources.sha256"
SOURCES = ("package.json", "package-lock.json", "tsconfig.json", "src", "style", "schema")


def source_files() -> list[Path]:
    files: list[Path] = []
    for name in SOURCES:
        path = SOURCE_DIR / name
        files.extend(sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path])
    return files


def sources_hash() -> str:
    digest = hashlib.sha256()
    for path in source_files():
        digest.update(path.relative_to(SOURCE_DIR).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()


def main(argv: list[str]) -> int:
    current = sources_hash()
    if "--write" in argv:
        STAMP.write_text(current + "\n")
        return 0
    recorded = STAMP.read_text().strip() if STAMP.exists() else ""
    if recorded != current:
        print(f"{STAMP.relative_to(REPO)} is not built from the current labextension/ sources: run `make labextension`")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
