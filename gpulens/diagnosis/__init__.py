"""Failure diagnosis: classify job logs, infer the origin, blacklist inputs, flag nodes."""

from __future__ import annotations

import os

from gpulens.diagnosis.types import CATEGORIES, DEFAULT_ORIGIN, ORIGINS, Diagnosis

__all__ = ["CATEGORIES", "DEFAULT_ORIGIN", "ORIGINS", "Diagnosis", "classify_file", "classify_text"]


def classify_text(text: str, *, file: str | None = None) -> Diagnosis:
    """Classify one failure log given as text (rules, then the SVM; see gpulens.diagnosis.classifier)."""
    from gpulens.diagnosis.classifier import classify_text as _classify_text

    return _classify_text(text, file=file)


def classify_file(path: str | os.PathLike[str]) -> Diagnosis:
    """Classify one log file in bounded memory and time; ``unknown`` with a reason on bad input."""
    from gpulens.diagnosis.classifier import classify_file as _classify_file

    return _classify_file(path)
