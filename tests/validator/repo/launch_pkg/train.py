"""Entry point for `python -m launch_pkg.train`."""

from .config import STEPS

print(STEPS)
