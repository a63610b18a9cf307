"""What runs inside a worker (placeholder until the distlib work lands)."""
