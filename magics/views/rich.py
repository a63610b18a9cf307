"""Workers' rich output in the notebook: the MIME bundles a session cell received (``display(...)``,
``plt.show()``) published into the notebook cell, and its last expression as the cell's ``Out``.

What comes from a worker is data that ``protocol/mime.py`` checked (types, base64, size): it is handed to
IPython's ``publish_display_data`` as it is, never executed or unpickled.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class RichItem:
    """One bundle a worker sent for a cell."""

    worker: int
    data: dict[str, Any]
    metadata: dict[str, Any] = field(default_factory=dict)


class RichPublisher:
    """Publishes a cell's new rich outputs into the notebook cell being executed (call from the kernel's main
    thread, as a blocking wait does: that is the cell they belong to)."""

    def __init__(self, label_workers: bool = False) -> None:
        self.published = 0
        self.label_workers = label_workers  # --display all: say which worker each output came from

    def tick(self, items: list[RichItem]) -> None:
        from IPython.display import publish_display_data

        for item in items[self.published:]:
            if self.label_workers:
                print(f"[{item.worker}]", flush=True)
            publish_display_data(item.data, item.metadata)
        self.published = len(items)


class WorkersValue:
    """A session cell's last expression, as the notebook cell's ``Out``: worker 0's MIME bundle; where another
    worker's ``text/plain`` differs, those follow as ``[i] ...`` lines (the rich forms are worker 0's)."""

    def __init__(self, results: dict[int, RichItem]):
        self.results = dict(sorted(results.items()))

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> tuple[dict[str, Any], dict[str, Any]]:
        first = next(iter(self.results.values()))
        data = dict(first.data)
        text = str(first.data.get("text/plain", ""))
        others = [f"[{i}] {item.data.get('text/plain', '')}" for i, item in self.results.items()
                  if item is not first and item.data.get("text/plain") != first.data.get("text/plain")]
        if others:
            data["text/plain"] = "\n".join([f"[{first.worker}] {text}", *others])
        return data, dict(first.metadata)

    def __repr__(self) -> str:
        return str(self._repr_mimebundle_()[0]["text/plain"])


class LiveOutputs:
    """The rich outputs of a cell run without ``--block``, as they come: an ipywidgets ``Output`` shown under the
    cell's view when the cell is shown (empty, it takes no room), filled from the session's thread. A blocking
    wait publishes into its own cell instead (``RichPublisher``)."""

    def __init__(self, label_workers: bool = False) -> None:
        import ipywidgets

        self.widget = ipywidgets.Output()
        self.label_workers = label_workers
        self.added = 0

    def show(self) -> None:
        from IPython.display import display

        display(self.widget)

    def add(self, items: list[RichItem]) -> None:
        """Append the items not added yet."""
        new, self.added = items[self.added:], len(items)
        if new:
            self.widget.outputs += tuple(part for item in new for part in self._parts(item))

    def add_value(self, value: WorkersValue) -> None:
        data, metadata = value._repr_mimebundle_()
        self.widget.outputs += ({"output_type": "display_data", "data": data, "metadata": metadata},)

    def _parts(self, item: RichItem) -> list[dict[str, Any]]:
        parts: list[dict[str, Any]] = []
        if self.label_workers:
            parts.append({"output_type": "stream", "name": "stdout", "text": f"[{item.worker}]\n"})
        parts.append({"output_type": "display_data", "data": item.data, "metadata": item.metadata})
        return parts
