"""One run in the kernel: the ``Cluster`` shell (I/O, threads) around the pure supervisor core (``core``),
the group launch, the relay socket, its outputs and the error a failed run raises.
"""
