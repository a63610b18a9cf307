"""What the Ray nodes import: the actors' code and what it imports there. ``host_actor``: one actor per worker,
hosting that worker's host process on its node; ``zygote_actor``: one per node, keeping a zygote there;
``state_copy``: a session's saved state between a node and the kernel (both halves: the node reads and writes its
own, the kernel checks what comes back); ``tls``: whether Ray's transport runs with TLS (each node reports its
own, the kernel adds them up). The kernel side (``ray/backend.py`` and its helpers) imports these, never the
reverse: a node loads no more of nbworkers than it runs (an import-linter contract in pyproject.toml).
"""
