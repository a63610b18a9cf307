"""Free TCP ports for the workers' TensorFlow servers.

There is no race-free way to hand a port to another process (TensorFlow's gRPC server binds 0.0.0.0 without
SO_REUSEPORT, so a held socket blocks it: tried here). We pick ports the kernel can bind, all at once so they
are distinct, and the cluster relaunches the group on fresh ports when a server reports that its port was
taken meanwhile (``PORT_TAKEN_MARKERS``; see tensorflow/tensorflow#46602).
"""

from __future__ import annotations

import socket

from nbworkers.protocol import tf_messages

# What a worker's log says when its TensorFlow server lost the race for its port (protocol/tf_messages.py).
PORT_TAKEN_MARKERS = tf_messages.PORT_TAKEN_MARKERS


def pick_free_ports(count: int, bind_host: str = "0.0.0.0") -> list[int]:
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind((bind_host, 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def port_taken(log_text: str) -> bool:
    return any(marker in log_text for marker in PORT_TAKEN_MARKERS)
