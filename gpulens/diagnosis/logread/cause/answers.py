"""The answers a decision check gives in place of the classifier's: the cause a rule found printed
before what the classifier read (its aftermath), an ``unknown`` for a process that died without a
word, the same answer with another origin; and where the answer's first evidence line is in the log."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from gpulens.diagnosis.hints import hint_for
from gpulens.diagnosis.keyscan import find_keys
from gpulens.diagnosis.rules import RuleMatch
from gpulens.diagnosis.types import Diagnosis

__all__ = ["MAX_EVIDENCE", "cause_of", "evidence_line", "quoted_line", "reorigin", "unknown_because"]


#: Evidence lines kept on an answer (a model_diverged one, a cause printed before its aftermath).
MAX_EVIDENCE = 6


def unknown_because(d: Diagnosis, reason: str) -> Diagnosis:
    """``unknown`` (origin too) for ``d``'s evidence when the process whose failure it shows died without
    a word of its own in the log: ``reason`` says which."""
    return Diagnosis("unknown", "unknown", _UNSAID_CONFIDENCE, list(d.evidence), method="rule", file=d.file,
                     reason=reason)


#: Confidence of that ``unknown``.
_UNSAID_CONFIDENCE = 0.5


def cause_of(d: Diagnosis, cause: RuleMatch, reason: str) -> Diagnosis:
    """The answer of ``cause``, a rule match printed before what ``d`` read (its aftermath): the
    rule's category and origin at 0.9 of its confidence, the cause's line first in the evidence."""
    line = cause.line.strip()[:300]
    return Diagnosis(cause.rule.category, cause.rule.origin, round(cause.rule.confidence * 0.9, 3),
                     [line, *d.evidence][:MAX_EVIDENCE], method="rule", rule_id=cause.rule.id, file=d.file,
                     reason=reason, hint=hint_for(cause.rule.category, [line]))


def reorigin(d: Diagnosis, origin: str, why: str) -> Diagnosis:
    """``d`` with ``origin``, ``why`` added to its reason."""
    return dataclasses.replace(d, origin=origin, reason=f"{d.reason}; {why}" if d.reason else why)


def evidence_line(d: Diagnosis, lines: Sequence[str], floor: int) -> int | None:
    """The index of the first line from ``floor`` that holds the end of ``d``'s first evidence line."""
    key = d.evidence[0].strip()[-_KEY_CHARS:] if d.evidence else ""
    found = find_keys(lines, (key,), floor) if key else []
    return found[0] if found else None


#: Characters of the kill's evidence line searched for in the log.
_KEY_CHARS = 40


def quoted_line(d: Diagnosis, lines: Sequence[str], lo: int) -> int | None:
    """The index of the first line from ``lo`` that holds ``d``'s first evidence line (its first 120
    characters, found through the literal index by its first 60): the exception line the answer quotes."""
    if not d.evidence:
        return None
    key = d.evidence[0].strip()[:120]
    return next((i for i in find_keys(lines, (key[:60],), lo) if key in lines[i]), None)
