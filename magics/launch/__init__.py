"""From a ``%%worker`` cell's flags to a checked ``LaunchSpec`` and each process's launch facts: bounds, roles,
``TF_CONFIG``, GPUs, ports, environment, names. Nothing here starts a process.
"""
