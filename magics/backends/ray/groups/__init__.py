"""A kernel's Ray worker groups: placing them, the pool of idle ones kept for warm runs (its decisions in core.py,
pure), and the node zygotes prewarmed at ``%load_ext``."""
