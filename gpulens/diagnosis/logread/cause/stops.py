"""The origin of a run stopped from outside, by what the log shows of the sender (README "Origin:
rules" O3): a scheduler's or a cloud's own decision, LSF's owner kill, an interrupt of a run that
was stalled, or no one named (unknown)."""

from __future__ import annotations

import re
from collections.abc import Sequence

from gpulens.diagnosis.guarded import contains_any
from gpulens.diagnosis.logread.cause.answers import (
    evidence_line,
    reorigin,
)
from gpulens.diagnosis.types import Diagnosis

__all__ = ["unnamed_stop"]


#: Rules whose evidence is a stop from outside that names no sender (README "Origin: rules", O3):
#: a SIGTERM the process received, slurmstepd's cancel without a "DUE TO" reason (scancel by the
#: owner, an administrator or a tool), a SIGHUP (a terminal or ssh session that ended), a DataLoader
#: worker that torch reports "killed by signal: Terminated" (torch/utils/data/_utils/signal_handling.py).
_UNNAMED_STOP_RULES = frozenset({"sigterm-handler", "launcher-child-sigterm", "slurm-cancelled", "signal-hangup",
                                 "r20-dataloader-worker-sigterm"})
#: Literals of the lines that name a scheduler's or a cloud's own decision to stop a job: Slurm's
#: reasons, LSF's and PBS's limits, preemption, eviction, a spot instance's reclaim. With one in
#: the log the stop is the infrastructure's (a Slurm run is not enough: scancel names no one).
_DECISIONS = ("DUE TO TIME LIMIT", "DUE TO PREEMPTION", "DUE TO NODE FAILURE", "DUE TO JOB REQUEUE", "TERM_RUNLIMIT",
              "TERM_CPULIMIT", "TERM_WINDOW", "TERM_PREEMPT", "exceeded limit", "wallclock", "preempt", "Preempt",
              "PREEMPT", "Evicted", "OOMKilled", "spot instance", "Spot instance", "SpotInterruption")
_names_a_decision = contains_any(_DECISIONS)
#: LSF's exit reasons for a job killed by a person: by its owner (the user's own hand) or by an
#: administrator (no reason given).
_LSF_BY_OWNER = re.compile(r"TERM_(?:REQUEUE_|FORCE_)?OWNER\b")


def unnamed_stop(d: Diagnosis, lines: Sequence[str]) -> Diagnosis:
    """The origin of a run stopped from outside by what the log shows of the sender (README "Origin:
    rules", O3): ``unknown`` for a SIGTERM, a Slurm cancel without a reason or a SIGHUP when no
    line names a scheduler's or a cloud's decision (a person, a watchdog script or the scheduler
    may have sent it); for LSF's "job killed by owner" ``user``, by an administrator ``unknown``;
    for an interrupt typed while the run said it was waiting (:func:`_stalled_before`, O4 (b))
    ``unknown``."""
    if d.category != "preempted":
        return d
    if d.rule_id == "user-interrupt" and d.origin != "unknown" and _stalled_before(d, lines):
        return reorigin(d, "unknown", "the run was waiting on something when it was interrupted: the stall, whose "
                                       "cause the log does not show, is the failure")
    if d.rule_id == "lsf-killed-by-user":
        mine = any(_LSF_BY_OWNER.search(e) for e in d.evidence[:1])
        origin = "user" if mine else "unknown"
        if d.origin == origin:
            return d
        return reorigin(d, origin, "LSF names the job's owner as the one who killed it" if mine
                         else "LSF names an administrator, not why")
    if d.rule_id not in _UNNAMED_STOP_RULES or d.origin == "unknown":
        return d
    if any(_names_a_decision(ln) for ln in lines):
        return d
    why = "no line names a scheduler's limit, a preemption or an eviction: who sent the stop is not in the log"
    return reorigin(d, "unknown", why)


#: A line in which the program says it is waiting on something ("waiting for batch...", "still
#: waiting for rank 0", "Waiting for the other processes"): an interrupt after it stopped a stall
#: (README "Origin: rules", O4 (b)).
_WAITING = re.compile(r"(?i)\b(?:still waiting|waiting for|waiting on)\b")
_STALL_SPAN = 20


def _stalled_before(d: Diagnosis, lines: Sequence[str]) -> bool:
    """Whether one of the ``_STALL_SPAN`` lines before the interrupt ``d`` read says the run was
    waiting."""
    at = evidence_line(d, lines, 0)
    return at is not None and any(_WAITING.search(ln) for ln in lines[max(0, at - _STALL_SPAN):at])
