"""What every process of a run shares: the relay's and sessions' wire formats, the ``NBWORKERS_*`` environment
table, the cell scan, TensorFlow's texts nbworkers recognises, the encoding of pulled values, private runtime
directories. Imports neither the kernel side (``nbworkers.magics``) nor TensorFlow: the kernel, the worker host,
the workers and the Jupyter server all import it.
"""
