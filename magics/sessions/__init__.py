"""Interactive sessions (``%%worker --session NAME``): workers that stay alive and run cell after cell.
"""
