"""What keeps a run private to its user on a shared machine, done the same way by every process: private runtime
directories and safe module command lines (``dirs``), run files opened without following links and owned by the
user (``files``), the run's private network namespace (``netns``), and the run id a forked worker writes into its
own ``/proc`` environment (``marker``). Standard library only, like the rest of the protocol.
"""
