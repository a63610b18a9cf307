"""Detached sessions (``%%worker --detach --session NAME``): the session served by its supervisor process, the
kernel a client of it over a private Unix socket."""
