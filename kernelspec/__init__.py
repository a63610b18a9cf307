"""The nbworkers kernel: a Python kernel that loads the extension at start, and the command that installs it.

``python -m nbworkers.kernelspec install [--user | --sys-prefix | --prefix P] [--name N] [--display-name D]``

The kernel runs ``python -m nbworkers.kernelspec.launch``: it hides the GPUs from the kernel process itself
(``CUDA_VISIBLE_DEVICES=-1``, so nothing the notebook imports grabs GPU memory the workers need), keeps the
machine's GPU list for the workers in ``NBWORKERS_VISIBLE_GPUS``, and starts ipykernel with the nbworkers
extension loaded, so ``%%worker`` works with no ``%load_ext``.

Kept free of imports: the launcher imports this package on every kernel start.
"""

DEFAULT_NAME = "nbworkers"
DEFAULT_DISPLAY_NAME = "Python 3 (nbworkers)"
