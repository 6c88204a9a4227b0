"""Trace importers: Philly public trace, Slurm sacct, job metric curves."""

__all__: list[str] = []
