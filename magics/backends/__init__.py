"""Where worker processes run: ``local`` (this machine) and, later, ``ray`` (many machines)."""
