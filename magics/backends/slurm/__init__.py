"""``%%worker --backend slurm``: the workers as job steps of the Slurm allocation the kernel runs in (``kind.py``)."""
