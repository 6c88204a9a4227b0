"""Join what the scheduler recorded about an attempt's end with what its log shows.

The termination reason (``attempts.reason``: ``OOMKilled``, ``Evicted``, ``DeadlineExceeded``,
...) and the exit code are evidence the log cannot give: a container killed for its memory
limit or evicted by the kubelet usually prints nothing about it. The rule
(:mod:`gpulens.ingest.termination` has the mapping):

* a **decisive** reason (memory limit, eviction, preemption) is what ended the process:
  its category, whatever the log's last error (which stays in the evidence);
* otherwise the log comes first when it names a failure, and the record (a deadline, a
  container that could not start, a reason such as ``Error`` with exit code 137/143/139) fills
  in when the log shows nothing (``unknown``, or no failure at all).

The record's line (``terminated: reason=OOMKilled, exit code 137``) is always in the evidence.
"""

from __future__ import annotations

import dataclasses

from gpulens.diagnosis.hints import hint_for
from gpulens.diagnosis.types import DEFAULT_ORIGIN, Diagnosis
from gpulens.ingest.termination import DECISIVE, category_of
from gpulens.vocab import NO_FAILURE

__all__ = ["METHOD", "with_termination"]

#: ``Diagnosis.method`` when the category comes from the termination record.
METHOD = "termination"


def with_termination(d: Diagnosis, reason: str | None, exit_code: int | None) -> Diagnosis:
    """``d`` (the log's diagnosis) joined with the attempt's termination reason and exit code.

    Without a recorded reason (schedulers that keep none) ``d`` is returned as it is: the exit
    code alone is already the origin network's ``exit`` evidence."""
    category, confidence = category_of(reason, exit_code)
    if reason is None or category == "unknown":
        return d
    line = f"terminated: reason={reason or '?'}, exit code {exit_code if exit_code is not None else '?'}"
    log_silent = d.category in ("unknown", NO_FAILURE)
    if not log_silent and reason not in DECISIVE:
        return dataclasses.replace(d, evidence=[*d.evidence, line])
    if d.category == category:
        return dataclasses.replace(d, confidence=max(d.confidence, confidence), evidence=[line, *d.evidence])
    evidence = [line, *d.evidence] if log_silent else [line, *(f"the log showed: {e}" for e in d.evidence[:3])]
    return Diagnosis(category, DEFAULT_ORIGIN[category], confidence, evidence, method=METHOD,
                     reason=None, file=d.file, hint=hint_for(category, evidence))
