"""Failure diagnosis: classify job logs, infer the origin, blacklist inputs, flag nodes."""

from diagnosis.types import CATEGORIES, DEFAULT_ORIGIN, ORIGINS, Diagnosis

__all__ = ["CATEGORIES", "DEFAULT_ORIGIN", "ORIGINS", "Diagnosis"]
