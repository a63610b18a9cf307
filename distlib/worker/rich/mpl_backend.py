"""matplotlib's backend in a session worker (``MPLBACKEND=module://nbworkers.distlib.worker.rich.mpl_backend``):
Agg drawing, and ``plt.show()`` sends the open figures to the notebook as PNG (``output.RichOutput``),
as ipykernel's inline backend shows them in the cell."""

from __future__ import annotations

from typing import Any

from matplotlib.backend_bases import FigureManagerBase
from matplotlib.backends.backend_agg import FigureCanvasAgg

FigureCanvas = FigureCanvasAgg
FigureManager = FigureManagerBase


def show(*args: Any, **kwargs: Any) -> None:
    from nbworkers.distlib.worker.rich import output

    if output.current is not None:
        output.current.figures()
