"""The notebook surface of the kernel side: ``%%worker`` and ``%workers`` (``magic``), sessions' cell magic,
the registry of this kernel's clusters, ``%workers attach``, ``--help``, ``%workers tensorboard`` and the
zygote listing.
"""
