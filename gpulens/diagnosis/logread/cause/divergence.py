"""Whether training had diverged before the failure the error context shows: the loss read NaN or
inf in every last metric line above it (a model_diverged answer when the context names no cause)."""

from __future__ import annotations

import re
from collections.abc import Sequence

from gpulens.diagnosis import logs
from gpulens.diagnosis.hints import hint_for
from gpulens.diagnosis.logread.cause.answers import MAX_EVIDENCE
from gpulens.diagnosis.types import DEFAULT_ORIGIN, Diagnosis

__all__ = ["DIVERGED_CONFIDENCE", "diverged_before", "diverged_loss"]


#: Confidence of "the loss was NaN/inf in every last metric line" when the error context itself
#: names no cause.
DIVERGED_CONFIDENCE = 0.7
#: Loss readings looked at, and lines searched back for them.
_LOSS_READINGS = 3
_LOSS_LOOKBACK = 2000
_LOSS = re.compile(r"(?i)\bloss\w{0,12}\s*[:=]\s*(-?inf|nan|[-+]?\d[\d.]*(?:e[-+]?\d+)?)\b")


#: An exception about non-finite values: "ValueError: Input contains NaN, infinity or a value too
#: large for dtype('float32').", "... but found invalid values: tensor([[nan, ...", "RuntimeError:
#: probability tensor contains either `inf`, `nan` or element < 0", "... contains NaN".
_NON_FINITE = re.compile(
    r"^(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception)\b.*(?:\b(?:NaN|nan|NAN|[Ii]nfinity|inf)\b|non-finite|not finite)")


def diverged_before(d: Diagnosis, lines: Sequence[str], floor: int, start: int, min_confidence: float) -> Diagnosis:
    """``model_diverged`` when the error context names no cause (``unknown``, or a model guess
    below ``min_confidence``) or its error is about non-finite values (scikit-learn's "Input
    contains NaN, infinity or a value too large", a NaN in a distribution's parameters: what a
    diverged model's outputs raise downstream), and the metric lines before it (from ``floor`` to
    ``start``) show the loss NaN/inf to the end; else ``d``."""
    if not (d.category == "unknown" or (d.method == "svm" and d.confidence < min_confidence)
            or (d.category != "model_diverged" and any(_NON_FINITE.search(e) for e in d.evidence[:2]))):
        return d
    at = diverged_loss(lines, floor, start)
    if at is None:
        return d
    line = logs.normalize_line(lines[at]).strip()[:300]
    return Diagnosis("model_diverged", DEFAULT_ORIGIN["model_diverged"], DIVERGED_CONFIDENCE,
                     [line, *d.evidence][:MAX_EVIDENCE], method="rule", file=d.file,
                     reason="the loss was NaN/inf in the last metric lines before the failure, whose own lines name no "
                            "other cause",
                     hint=hint_for("model_diverged", [line]))


def diverged_loss(lines: Sequence[str], floor: int, stop: int) -> int | None:
    """The index of the last metric line before ``stop`` when the last few loss readings (each
    line's last "loss: x") are all NaN/inf: training diverged before the failure. None when
    fewer readings, or any finite one."""
    lo = max(floor, stop - _LOSS_LOOKBACK)
    if not any(k in ln for ln in lines[lo:stop] for k in ("nan", "NaN", "inf")):
        return None
    got: list[tuple[int, str]] = []
    for i in range(stop - 1, lo - 1, -1):
        line = lines[i]
        if "loss" not in line and "Loss" not in line and "LOSS" not in line:
            continue
        readings = _LOSS.findall(line[-400:])
        if readings:
            got.append((i, readings[-1].lower()))
            if len(got) >= _LOSS_READINGS:
                break
    if len(got) < _LOSS_READINGS or not all(v in ("nan", "inf", "-inf") for _, v in got):
        return None
    return got[0][0]
