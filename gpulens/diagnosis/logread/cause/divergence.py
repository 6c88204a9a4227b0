"""Whether training had diverged before the failure the error context shows: the loss read NaN or
inf in every last metric line above it (a model_diverged answer when the context names no cause)."""

from __future__ import annotations

import re
from collections.abc import Sequence

from gpulens.diagnosis import logs
from gpulens.diagnosis.guarded import contains_any
from gpulens.diagnosis.hints import hint_for
from gpulens.diagnosis.logread.cause.answers import MAX_EVIDENCE
from gpulens.diagnosis.logread.indicators.markers import streak_start
from gpulens.diagnosis.types import DEFAULT_ORIGIN, Diagnosis

__all__ = ["DIVERGED_CONFIDENCE", "diverged_before", "diverged_loss", "stopped_on_nan"]


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


#: An early-stopping message (the stopper's own words, not its patience counter or its setting).
_EARLY_STOP = re.compile(r"[Ee]arly [Ss]topp(?:ing|ed)\b(?! [Cc]ounter| patience)|EarlyStopping\b(?! counter)"
                         r"|Signaling Trainer to stop|\bdidn't improve for \d+ epochs\. Training stops\.")
#: ``any(k in line for k in ...)`` for the literals every :data:`_EARLY_STOP` match holds (speed: a
#: long progress-bar line is not searched by the pattern).
_early_stop_key = contains_any(("arly ", "EarlyStopping", "Signaling Trainer", "didn't improve"))
_nan_key = contains_any(("nan", "NaN", "NAN", "inf", "Inf"))
#: Lines above a completion message searched for the early stop that ended the run, and above the
#: stop for the NaN reading that made it fire.
_STOP_LOOKBACK = 20
#: A NaN or infinite reading printed as a column of its own ("178 nan ****", "loss nan").
_NAN_TOKEN = re.compile(r"(?<![\w.])(?:nan|NaN|NAN|-?inf|-?Inf)(?![\w.])")


def stopped_on_nan(lines: Sequence[str], floor: int, done: int) -> tuple[int, int] | None:
    """(first NaN line of the streak, the early-stop line) when the run's normal end at ``done`` is
    an early stop (within ``_STOP_LOOKBACK`` lines above it) and the loss readings before the stop
    were NaN/inf to the end: the stopper fired because the loss was NaN (README C10: the loss became
    NaN and that ended the run). Read from the keyed loss readings (:func:`diverged_loss`, the streak's
    first by :func:`markers.streak_start`) or, where the metric rows name no loss, from the last rows of
    the NaN row's own shape (:func:`_nan_rows`).
    A run that went on to its last epoch with a NaN loss ended normally; None here."""
    stop = next((k for k in range(done, max(floor, done - _STOP_LOOKBACK) - 1, -1)
                 if _early_stop_key(lines[k]) and _EARLY_STOP.search(lines[k])), None)
    if stop is None or not any(_nan_key(lines[k]) and _NAN_TOKEN.search(lines[k])
                               for k in range(max(floor, stop - _STOP_LOOKBACK), stop)):
        return None  # no NaN reading just above the stop: not what made it fire
    at = diverged_loss(lines, floor, stop)
    first = _nan_rows(lines, floor, stop) if at is None else streak_start(lines, at, floor)
    return None if first is None else (first, stop)


#: A number (integer, decimal, exponent) or a NaN/inf reading: one column, whatever it holds.
_READING = re.compile(r"(?<![\w.])(?:[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?|nan|NaN|NAN|-?inf|-?Inf)(?![\w.])")


def _masked(line: str) -> str:
    """A metric row's shape: every reading (a number or NaN/inf) masked alike."""
    return _READING.sub("N", logs.normalize_line(line).strip())


def _nan_rows(lines: Sequence[str], floor: int, stop: int) -> int | None:
    """In metric rows that name no loss, the first line of the run of NaN rows that ends them before
    ``stop``: the last line with a NaN/inf column, its shape (numbers and NaN masked); the last
    ``_LOSS_READINGS`` lines of that shape all hold NaN, and the streak begins after a row of the same
    shape with finite numbers (a metric column that turned NaN). None otherwise."""
    lo = max(floor, stop - _LOSS_LOOKBACK)
    last = next((k for k in range(stop - 1, lo - 1, -1) if _NAN_TOKEN.search(lines[k])), None)
    if last is None:
        return None
    shape = _masked(lines[last])
    rows = [k for k in range(last, lo - 1, -1) if _masked(lines[k]) == shape]
    streak = 0
    while streak < len(rows) and _NAN_TOKEN.search(lines[rows[streak]]):
        streak += 1
    if streak < _LOSS_READINGS or streak == len(rows):
        return None
    return rows[streak - 1]
