"""A session worker's rich output (``output.py``: ``display``, the last expression, figures), the cell as it runs
(``cell_code.py``: compiled with its last expression apart, the traceback from its own frames) and the matplotlib
backend that sends figures on ``plt.show()`` (``mpl_backend.py``). Nothing here imports IPython or matplotlib
until the user's code does."""
