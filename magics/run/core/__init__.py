"""The pure core of a run's lifecycle: events in, actions out (``supervisor``), on an injected clock. No I/O,
no threads, no sockets: everything here is tested in milliseconds without TensorFlow or processes.
"""
