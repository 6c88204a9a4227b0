"""A helper that nothing imports."""
