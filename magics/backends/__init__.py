"""Where worker processes run: ``local`` (this machine: forked from a zygote or spawned; ``local``, ``zygotes``) and
``ray`` (the nodes of a Ray cluster, ``--backend ray``: ``ray/``)."""
