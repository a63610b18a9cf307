"""The sidebar's copy of the status vocabulary, written from ``protocol/statuses.py``: the run statuses as a union
type, their labels, the ended ones and the kernel-gone reason (labextension/src/statuses.ts), and every status's
colour (labextension/style/statuses.css).

    python tools/vocabulary.py --write   # after a change of protocol/statuses.py (``make labextension`` runs it)
    python tools/vocabulary.py           # exit 1 when a written file differs from what the protocol says

tests/unit/test_vocabulary.py runs the check; the widget's CSS is generated at import instead
(magics/views/words.py ``status_css``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from nbworkers.protocol.statuses import ENDED, KERNEL_GONE, LOOKS, ClusterStatus

REPO = Path(__file__).resolve().parent.parent
TS = REPO / "labextension" / "src" / "statuses.ts"
CSS = REPO / "labextension" / "style" / "statuses.css"
HEAD = "Written by tools/vocabulary.py from protocol/statuses.py: edit that, then run `make labextension`."


def _q(text: str) -> str:
    return json.dumps(text)


def statuses_ts() -> str:
    runs = [status.value for status in ClusterStatus]
    union = "\n".join(f"  | {_q(status)}" for status in runs)
    labels = "\n".join(f"  {status}: {_q(LOOKS[status].label)}," for status in runs)
    ended = ", ".join(_q(status) for status in runs if status in ENDED)
    return (f"// {HEAD}\n\n"
            f"/** Where a run is (ClusterStatus): a listing row's ``status``. */\nexport type RunStatus =\n{union};\n\n"
            f"/** What a run's status reads as (LOOKS): a lost run reads as the stop it is (LOST_LABEL). */\n"
            f"export const STATUS_LABELS: Record<RunStatus, string> = {{\n{labels}\n}};\n\n"
            f"/** Statuses after which nothing changes any more (ENDED). */\n"
            f"export const ENDED: ReadonlySet<string> = new Set<RunStatus>([{ended}]);\n\n"
            f"/** Why a run stopped when its kernel restarted or died (KERNEL_GONE): the Restart button's tooltip on"
            f" such a run. */\nexport const KERNEL_GONE =\n  {_q(KERNEL_GONE)};\n")


def statuses_css() -> str:
    rules = "\n".join(f".nbw-sb-status-{status} {{ background: {look.colour}; }}" for status, look in LOOKS.items())
    return f"/* {HEAD} */\n{rules}\n"


def files() -> dict[Path, str]:
    return {TS: statuses_ts(), CSS: statuses_css()}


def stale() -> list[Path]:
    """The written files that differ from what the protocol says now."""
    return [path for path, text in files().items() if not path.exists() or path.read_text() != text]


def main(argv: list[str]) -> int:
    if argv == ["--write"]:
        for path, text in files().items():
            path.write_text(text)
        return 0
    differ = stale()
    for path in differ:
        print(f"{path.relative_to(REPO)} differs from protocol/statuses.py: run `python tools/vocabulary.py --write`")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
