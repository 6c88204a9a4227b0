"""A stale tool script, not part of training."""

print("export")
