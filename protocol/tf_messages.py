"""Texts TensorFlow, Keras and gRPC print or raise that nbworkers recognises, in one place, with their origin.

Some failures have no exit code or exception type that tells them apart, only the text: the kernel classifies
a worker's exit by the end of its log (``magics/run/core/failures.py``, ``magics/launch/ports.py``) and the worker turns
Keras 3's failures into clear errors (``distlib/compat/keras3/fit_guard.py``). Like the private symbols of
``distlib/compat/internals.py``, these are upstream internals: each group says where the text comes from and the
versions it was seen on (tests/integration/test_compat_internals_installed.py checks the ones that live in Python
sources).

Pure data: the kernel imports this (it never imports TensorFlow).
"""

from __future__ import annotations

# What a surviving worker's log says when a peer vanished under it (its failure is then the peer's, not its
# own: ``failures.PeerLost``). From gRPC's status messages (UNAVAILABLE "Socket closed", "failed to connect to
# all addresses", "Connection reset by peer", "Broken pipe", DEADLINE_EXCEEDED), TensorFlow's collective
# executor ("Collective ops is aborted by: ...", libtensorflow_framework) and coordination service (its
# heartbeat and "CoordinationService" errors), raised in Python as UnavailableError / CancelledError; "peer"
# catches the rest. Matched against the last error line of a worker's log only (``failures.classify_exit``).
PEER_LOST_MARKERS = (
    "UnavailableError", "Socket closed", "Connection reset by peer", "failed to connect to all addresses",
    "Collective ops is aborted", "CancelledError", "DEADLINE_EXCEEDED", "Unable to find a heartbeat",
    "coordination service", "CoordinationService", "peer", "Broken pipe",
)

# What TensorFlow raises in a worker whose Stop (SIGINT: distlib/worker/stop_signal.py raises KeyboardInterrupt)
# arrived inside a collective op: pybind11's error_already_set ("MISMATCH of original and normalized active exception
# types: ORIGINAL UnavailableError REPLACED BY KeyboardInterrupt", a RuntimeError), TensorFlow 2.21.0 with its
# pybind11. The worker then reads "stopped", as for the KeyboardInterrupt itself (distlib/worker/bootstrap.py).
INTERRUPTED_INSIDE_OP = ("REPLACED BY KeyboardInterrupt",)

# What a worker's log says when its TensorFlow gRPC server lost the race for its port (the kernel picked the
# port free, someone took it before the server bound it: tensorflow/tensorflow#46602). From TensorFlow's
# grpc_server_lib ("Could not start gRPC server", "Failed to add port to server", libtensorflow_cc, 2.15.1 and
# 2.21.0) and the OS ("Address already in use").
PORT_TAKEN_MARKERS = ("Could not start gRPC server", "Address already in use", "Failed to add port to server")

# Keras 3's model.fit under MultiWorkerMirroredStrategy (keras-team/keras#20585): TensorFlow's conversion error
# "Attempt to convert a value (PerReplica...)" from the data all-reduce in TensorFlowTrainer._maybe_symbolic_build,
# and TensorFlow's "Invalid reduction dimension" (tensorflow/tensorflow#72388) from reduce_per_replica's axis=0
# on a scalar. Keras 3.15.1 with TensorFlow 2.21.0.
KERAS3_FIT_UNDER_MWMS = ("PerReplica", "Invalid reduction dimension")

# Keras 3's model.fit under ParameterServerStrategy: TensorFlow's error (distribute/coordinator/
# coordinator_context.py) names the coordinator method Keras 3 never calls. Keras 3.15.1, TensorFlow 2.21.0.
KERAS3_FIT_UNDER_PSS = ("create_per_worker_dataset",)


def mentions(text: str, markers: tuple[str, ...]) -> bool:
    return any(marker in text for marker in markers)
