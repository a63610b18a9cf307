"""What a run shows in a notebook: the anywidget dashboard (``widget`` with its JS/CSS and vendored uPlot), its
text/HTML fallback and final summary, the blocking cell's echo, a session cell's view.
"""
