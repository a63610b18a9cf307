"""Handles on runs this kernel does not hold: ``%workers attach NAME`` (attach.py: a dead or another kernel's run,
read-only; a detached run, controllable), ``%%worker --detach`` (detach.py) and a detached session's client
(detached_session.py)."""
