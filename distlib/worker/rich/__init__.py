"""A session worker's rich output (``output.py``: ``display``, the last expression, figures) and the matplotlib
backend that sends figures on ``plt.show()`` (``mpl_backend.py``). Nothing here imports IPython or matplotlib
until the user's code does."""
