"""Metrics from a worker to the notebook: ``report()`` and the Keras ``ReportCallback``.

Both are throttled (at most one message per ``NBWORKERS_REPORT_INTERVAL`` seconds, default 0.25; the
latest throttled values are kept and sent on the next chance or on ``flush``) and cost a clock read and a
dict when throttled. Values are converted to floats only when sent, so passing eager tensors does not force
a device sync on throttled calls. Outside ``%%worker`` (no relay in the environment) they do nothing.

Convention used by ``ReportCallback`` and ``fit``: ``epoch`` and ``step`` are 1-based positions as Keras
prints them ("Epoch 2/3", step 5 of ``steps_total``).
"""

from __future__ import annotations

import os
import time
from typing import Any

from nbworkers.distlib.compat.tf_keras_callbacks import TfKerasProtocol
from nbworkers.distlib.tensorboard import ReportSummaries
from nbworkers.protocol import env_settings, wire

ENV_REPORT_INTERVAL = env_settings.REPORT_INTERVAL.name
DEFAULT_REPORT_INTERVAL_S = env_settings.REPORT_INTERVAL.default


def _report_interval_s() -> float:
    return env_settings.REPORT_INTERVAL.get()


def _to_number(value: Any) -> float | int | None:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, (int, float)):
        return value
    try:
        return float(value)  # numpy scalars, 0-d arrays, eager scalar tensors
    except (TypeError, ValueError):
        return None


def _to_int(value: Any) -> int | None:
    if value is None:
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


class Reporter:
    """Throttled sender of ``metrics`` messages (one per process: ``reporter()``)."""

    def __init__(self, sender: wire.Sender | None, interval_s: float):
        self.sender = sender
        self.interval_s = interval_s
        self.sent = 0
        self._last_sent_at = float("-inf")
        self._pending: dict[str, Any] | None = None
        self._summaries: Any = None  # TensorBoard scalars of what is sent (distlib/tensorboard.py)

    def report(self, fields: dict[str, Any], force: bool = False) -> bool:
        """Send now unless throttled (then keep the values for later). True when a message went out."""
        if self.sender is None:
            return False
        now = time.monotonic()
        if not force and now - self._last_sent_at < self.interval_s:
            self._pending = fields
            return False
        self._pending = None
        self._last_sent_at = now
        return self._send(fields)

    def flush(self) -> bool:
        """Send the latest throttled values, if any."""
        if self._pending is None or self.sender is None:
            return False
        fields, self._pending = self._pending, None
        self._last_sent_at = time.monotonic()
        return self._send(fields)

    def _send(self, fields: dict[str, Any]) -> bool:
        if self.sender is None:  # (report() and flush() checked it)
            return False
        metrics = {}
        values = fields["metrics"]
        if hasattr(values, "fetch") and not isinstance(values, dict):  # a RemoteValue (see ReportCallback._report)
            values = values.fetch()
        for name, value in values.items():
            number = _to_number(value)
            if number is not None:
                metrics[str(name)] = number
        ok = self.sender.send(
            "metrics",
            metrics=metrics,
            step=_to_int(fields.get("step")),
            epoch=_to_int(fields.get("epoch")),
            steps_total=_to_int(fields.get("steps_total")),
            epochs_total=_to_int(fields.get("epochs_total")),
        )
        self.sent += ok
        self._write_summaries(metrics, fields)
        return ok

    def _write_summaries(self, metrics: dict[str, Any], fields: dict[str, Any]) -> None:
        if self._summaries is None:
            self._summaries = ReportSummaries()
        self._summaries.write(metrics, _to_int(fields.get("step")), _to_int(fields.get("epoch")),
                              _to_int(fields.get("steps_total")), iterations=fields.get("iterations"))


_reporter: Reporter | None = None
_reporter_pid: int | None = None


def reporter() -> Reporter:
    global _reporter, _reporter_pid
    if _reporter is None or _reporter_pid != os.getpid():
        _reporter = Reporter(wire.process_sender(), _report_interval_s())
        _reporter_pid = os.getpid()
    return _reporter


def report(
    step: int | None = None,
    epoch: int | None = None,
    *,
    steps_total: int | None = None,
    epochs_total: int | None = None,
    flush: bool = False,
    **metrics: Any,
) -> bool:
    """Report metrics (``loss=0.3, accuracy=0.9``) at ``step``/``epoch`` to the notebook's widget.

    Throttled; ``flush=True`` sends at once (use it for end-of-epoch values). Returns whether a message was
    sent. Does nothing outside %%worker.
    """
    fields = {"metrics": metrics, "step": step, "epoch": epoch, "steps_total": steps_total,
              "epochs_total": epochs_total}
    return reporter().report(fields, force=flush)


def flush_reports() -> bool:
    """Send the latest throttled report now (called at the end of training and after the cell)."""
    return reporter().flush()


class ReportCallback(TfKerasProtocol):
    """A Keras callback reporting epoch, step and the logged metrics; works with Keras 3 and tf_keras.

    It implements the callback protocol of both (they have different ``Callback`` base classes), so the
    same object can go into ``model.fit(callbacks=[...])`` of either, and into ``distlib.fit`` (tf_keras's private
    part of it: ``compat/tf_keras_callbacks.py``).
    """

    async_safe = False

    def __init__(self, every_n_steps: int = 1):
        self.every_n_steps = max(1, int(every_n_steps))
        self.model = None
        self.params: dict[str, Any] = {}
        self._epoch = 0

    # Protocol shared by Keras 3 and tf_keras.
    def set_params(self, params: dict[str, Any]) -> None:
        self.params = dict(params or {})

    def set_model(self, model) -> None:
        self.model = model

    def _report(self, step: int | None, epoch: int, logs: dict | None, force: bool) -> None:
        fields = {
            # logs may name a metric "step" or "epoch": keep them apart. Under ParameterServerStrategy tf_keras
            # passes a RemoteValue of the logs: fetched only when a report is sent (throttled).
            "metrics": logs if hasattr(logs, "fetch") and not isinstance(logs, dict) else dict(logs or {}),
            "step": step,
            "epoch": epoch,
            "steps_total": self.params.get("steps"),
            "epochs_total": self.params.get("epochs"),
            # the TensorBoard step (read only when a report is sent): continues across fit calls
            "iterations": getattr(getattr(self.model, "optimizer", None), "iterations", None),
        }
        reporter().report(fields, force=force)

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        self._epoch = epoch + 1

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        if (batch + 1) % self.every_n_steps == 0:
            self._report(batch + 1, self._epoch, logs, force=False)

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        self._report(self.params.get("steps"), epoch + 1, logs, force=True)

    def on_train_end(self, logs: dict | None = None) -> None:
        flush_reports()

    def _noop(self, *args: Any, **kwargs: Any) -> None:
        return None

    on_train_begin = on_test_begin = on_test_end = on_predict_begin = on_predict_end = _noop
    on_batch_begin = on_batch_end = on_train_batch_begin = _noop
    on_test_batch_begin = on_test_batch_end = on_predict_batch_begin = on_predict_batch_end = _noop
