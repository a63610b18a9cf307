"""The nbworkers kernel: a Python kernel that loads the extension at start."""
