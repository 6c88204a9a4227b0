"""A stale experiment script (the tests break it on purpose)."""

print("old")
