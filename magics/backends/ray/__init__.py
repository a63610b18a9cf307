"""The Ray backend: workers on Ray nodes (``backend`` in the kernel, ``worker``
the kernel's view of one worker, ``address`` which cluster ``--address`` names; ``nodes/``: what the nodes import,
``nodes/host_actor`` the actor hosting each worker, ``nodes/zygote_actor`` a node's zygote).
"""
