"""The Ray backend: workers on Ray nodes (``backend`` in the kernel, ``node`` the actor on each node, ``worker``
the kernel's view of one worker, ``address`` which cluster ``--address`` names).
"""
