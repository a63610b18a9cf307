"""The worker host: the small process between the kernel and one worker interpreter (``worker_host``), its
command line (``command``) and its side of the zygote (``zygote_client``). Imports ``nbworkers.protocol`` and
``nbworkers.procs`` only: neither the kernel side nor TensorFlow.
"""
