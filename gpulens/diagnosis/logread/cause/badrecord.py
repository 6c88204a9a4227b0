"""Whether a plain Python exception is one data record the code could not take: an error a
DataLoader worker caught while it read a sample (README C4), or a ValueError it caught after the
loader had fed the run (incorrect_input)."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence

from gpulens.diagnosis import logs
from gpulens.diagnosis.hints import hint_for
from gpulens.diagnosis.keyscan import find_keys
from gpulens.diagnosis.logread.cause.answers import MAX_EVIDENCE, quoted_line
from gpulens.diagnosis.logread.cause.filekind import file_kind
from gpulens.diagnosis.logread.cause.raisedin import CODE, DATA, raised_in
from gpulens.diagnosis.logread.lines import is_progress
from gpulens.diagnosis.logread.tracebacks import EXCEPTION
from gpulens.diagnosis.types import Diagnosis

__all__ = ["EITHER_READING", "bad_record", "one_record_failed", "raised_in_code", "raised_reading"]


#: The generic rule of a plain Python exception, and torch's re-raise of one that a DataLoader
#: worker caught while it fetched a sample (torch/_utils.py ExceptionWrapper.reraise: "<Type>:
#: Caught <Type> in DataLoader worker process N."). A ValueError or ZeroDivisionError there, after
#: the loader had already fed training steps, is one record the code path cannot take (a video
#: with no frames, a document with too few passages): the same code read the others.
_GENERIC_EXCEPTION = "python-logic-exception"
_WORKER_CAUGHT = re.compile(r"(?:ValueError|ZeroDivisionError): Caught (?:ValueError|ZeroDivisionError) in DataLoader "
                            r"worker process \d+")
_WORKER_SPAN = 400
#: Progress lines before the failure that show the loader had fed the run.
_FED_STEPS = 3
_BAD_RECORD_CONFIDENCE = 0.6
#: README C4: an error whose message could be the data's or the code's (a KeyError on a field, an
#: index or shape assert, a broadcast mismatch) raised in data-reading code (a Dataset's
#: __getitem__ or a collate_fn, which is what a DataLoader worker runs) is incorrect_input. Plain
#: bugs of code (TypeError, AttributeError, NameError) stay semantic errors.
EITHER_READING = ("KeyError", "IndexError", "AssertionError", "ValueError", "RuntimeError", "ZeroDivisionError")
_WORKER_EITHER = re.compile(rf"({'|'.join(EITHER_READING)}): Caught \1 in DataLoader worker process \d+")
_WORKER_RULES = frozenset({_GENERIC_EXCEPTION, "dataloader-worker-reraised"})


def bad_record(d: Diagnosis, lines: Sequence[str], floor: int, start: int) -> Diagnosis:
    """For a plain Python exception (``d`` from the generic rule), :func:`one_record_failed`; then, for
    one a DataLoader worker caught, :func:`_worker_read`; then :func:`raised_reading`, :func:`raised_in_code`
    and, for a file error, :func:`filekind.file_kind`."""
    if d.rule_id == _GENERIC_EXCEPTION:
        d = one_record_failed(d, lines, floor, start)
    d = _worker_read(d, lines, floor, start) if d.rule_id in _WORKER_RULES else d
    d = raised_in_code(raised_reading(d, lines, floor, start), lines, floor, start)
    return file_kind(d, lines, floor, start)  # round 25 c2c3: what the file is (README C2/C3)


def _worker_read(d: Diagnosis, lines: Sequence[str], floor: int, start: int) -> Diagnosis:
    """``incorrect_input`` for an error of either reading (:data:`_WORKER_EITHER`) that a DataLoader
    worker caught while it read a sample (README C4); the origin stays ``d``'s: whether the data as
    delivered or the job's own setting is at fault (C5) is not in the message."""
    hits = find_keys(lines, ("in DataLoader worker process",), max(floor, start - _WORKER_SPAN), start + _WORKER_SPAN)
    at = next((i for i in hits if _WORKER_EITHER.search(lines[i])), None)
    if at is None:
        return d
    line = logs.normalize_line(lines[at]).strip()[:300]
    evidence = [line, *(e for e in d.evidence if e != line)][:MAX_EVIDENCE]
    return dataclasses.replace(d, category="incorrect_input", evidence=evidence, rule_id=None,
                               hint=hint_for("incorrect_input", evidence),
                               reason="a DataLoader worker failed reading a sample (its Dataset or collate_fn): "
                                      "data-reading code, README C4")


def one_record_failed(d: Diagnosis, lines: Sequence[str], floor: int, start: int) -> Diagnosis:
    """``incorrect_input`` (data) for a ValueError or ZeroDivisionError a DataLoader worker caught
    after at least ``_FED_STEPS`` progress lines of the attempt; else ``d``."""
    hits = find_keys(lines, ("in DataLoader worker process",), max(floor, start - _WORKER_SPAN), start + _WORKER_SPAN)
    at = next((i for i in hits if _WORKER_CAUGHT.search(lines[i])), None)
    if at is None or sum(1 for ln in lines[max(floor, at - _WORKER_SPAN):at] if is_progress(ln)) < _FED_STEPS:
        return d
    line = logs.normalize_line(lines[at]).strip()[:300]
    evidence = [line, *(e for e in d.evidence if e != line)][:MAX_EVIDENCE]
    return dataclasses.replace(d, category="incorrect_input", origin="data", confidence=_BAD_RECORD_CONFIDENCE,
                               evidence=evidence, rule_id=None, hint=hint_for("incorrect_input", evidence),
                               reason="a DataLoader worker failed on one sample after the loader had fed the run: "
                                      "a record the code cannot take")


#: Rules whose message could be the data's or the code's (README C4): the generic rule of a plain Python
#: exception, and ATen's shape checks (a tensor of a sample of another size, an image with four channels
#: normalized with three means, stacked in a Dataset or a collate_fn as easily as in a model).
_EITHER_RULES = frozenset({_GENERIC_EXCEPTION, "aten-shape-checks"})
#: Confidence of an answer read from where the exception was raised: the frames say where, not whether
#: the record or the job's reading of it is at fault.
_RAISED_CONFIDENCE = 0.75


def raised_reading(d: Diagnosis, lines: Sequence[str], floor: int, start: int) -> Diagnosis:
    """``incorrect_input`` (data) for a semantic error of either reading (:data:`_EITHER_RULES`,
    :data:`EITHER_READING`) whose exception was raised in data-reading code, as its traceback's frames show
    (:func:`raisedin.raised_in`; README C4); else ``d``. Without frames nothing changes."""
    if d.category != "semantic_error" or d.rule_id not in _EITHER_RULES or not d.evidence:
        return d
    m = EXCEPTION.match(d.evidence[0].strip())
    if m is None or m.group("name") not in EITHER_READING or _raised_where(d, lines, floor, start) != DATA:
        return d
    return dataclasses.replace(d, category="incorrect_input", origin="data", confidence=_RAISED_CONFIDENCE,
                               rule_id=None, hint=hint_for("incorrect_input", d.evidence),
                               reason=f"{m.group('name')} raised in data-reading code (a DataLoader's fetch, a "
                                      "Dataset, a collate_fn, a datasets map function): README C4")


#: Rules that read incorrect_input from a message alone where the message can come from code as well (README
#: C4): torch.stack's "stack expects each tensor to be equal size" (a collate_fn's, or a model's own stack),
#: numpy's "cannot reshape array of size N into shape" (a truncated array file, or the job's reshape), a JSON
#: decoder's error (a data file, or a DeepSpeed or HfArgumentParser JSON config: C2, the job's configuration) and
#: label checks ("labels must be ...").
_MESSAGE_ONLY_DATA = frozenset({"collate-stack-unequal-size", "data-malformed", "json-decode-error", "data-validation"})


def raised_in_code(d: Diagnosis, lines: Sequence[str], floor: int, start: int) -> Diagnosis:
    """``semantic_error`` (user) for an incorrect_input answer of :data:`_MESSAGE_ONLY_DATA` whose exception
    was raised in model, trainer or argument code, as its traceback's frames show (:func:`raisedin.raised_in`;
    README C4: a module's forward, a loss, DeepSpeed's config, HfArgumentParser); else ``d``."""
    if d.category != "incorrect_input" or d.rule_id not in _MESSAGE_ONLY_DATA or not d.evidence:
        return d
    m = EXCEPTION.match(d.evidence[0].strip())
    if m is None or m.group("name") not in (*EITHER_READING, "JSONDecodeError"):
        return d  # a corrupt archive, an undecodable file: what the file is decides (C2), not where
    if _raised_where(d, lines, floor, start) != CODE:
        return d
    return dataclasses.replace(d, category="semantic_error", origin="user", confidence=_RAISED_CONFIDENCE,
                               rule_id=None, hint=hint_for("semantic_error", d.evidence),
                               reason="raised in model, trainer or argument code (a forward, a loss, an argument "
                                      "or config parser), not in data-reading code: README C4")


def _raised_where(d: Diagnosis, lines: Sequence[str], floor: int, start: int) -> str | None:
    """Where the exception of ``d``'s first evidence line was raised (:func:`raisedin.raised_in`), that line
    found from ``_WORKER_SPAN`` lines above the error region on; None when it is not found."""
    at = quoted_line(d, lines, max(floor, start - _WORKER_SPAN))
    return None if at is None else raised_in(lines, at)
