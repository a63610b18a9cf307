"""A detached run (``%%worker --detach``): its supervisor process (``supervisor``) and how the kernel
starts it (``start``)."""
