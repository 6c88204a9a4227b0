"""Which lines the classifier sees beside the first failing rank's own error context: the
scheduler's and the kernel's lines about the whole job (they name a host, not a rank), the kill
lines printed after the job's tasks had already failed (left out: not the cause), and the
root-cause rank's own traceback above the context."""

from __future__ import annotations

import re
from collections.abc import Sequence

from gpulens.diagnosis import logs
from gpulens.diagnosis.logread import ranks
from gpulens.diagnosis.logread.cause.diedbefore import (
    OWN_EXIT_CODE,
    ROOT_LOOKBACK,
    died_before,
)
from gpulens.diagnosis.logread.lines import is_scheduler_kill
from gpulens.diagnosis.logread.tracebacks import has_head

__all__ = ["job_lines", "late_kills", "root_rank_lines"]


#: Literals of the lines a scheduler or the kernel writes about the whole job.
_JOB_KEYS = ("slurmstepd", "srun: error", "oom-kill", "oom_kill", "OOMKilled", "Out of memory: Kill", "CANCELLED")


def job_lines(lines: Sequence[str], failures: Sequence[int], start: int, context: Sequence[str]) -> list[str]:
    """The scheduler's and the kernel's failure lines at or after ``start`` that the first
    failing rank's context left out (they name a host, not a rank: a per-rank filter drops them
    when the host is spelled differently, "gpu016" vs "gpu016.cluster.edu")."""
    have = set(context)
    out = []
    for i in failures:
        line = lines[i]
        if i < start or line in have or not any(k in line for k in _JOB_KEYS):
            continue
        if is_scheduler_kill(logs.normalize_line(line)) or "slurmstepd" in line or "srun: error" in line:
            out.append(line)
    return out


#: srun's line for tasks that ended on their own: a non-zero code (1-127: not by a signal), or
#: the strsignal() name of a signal a task's own fault raises (SIGSEGV, SIGABRT, SIGBUS, SIGILL,
#: SIGFPE), which srun prints in place of the code (SchedMD/slurm src/srun launch _task_finish).
_TASKS_EXITED = re.compile(rf"srun: error: .*(?:Exited with exit code {OWN_EXIT_CODE}\b"
                           r"|: tasks? [\d,-]+: (?:Segmentation fault|Aborted|Bus error|Illegal instruction"
                           r"|Floating point exception)\b)")
#: What srun prints when it kills the rest of a step after a task failed ("Terminating job step
#: 421.0", "Terminating StepId=421.0"), and its lines for the tasks that kill ended.
_SRUN_TERMINATING = "srun: Terminating "
_STOPPED_TASKS = re.compile(r"srun: error: \S+: tasks? [\d,-]+: (?:Terminated|Killed)\s*$")


def late_kills(lines: Sequence[str], failures: Sequence[int], start: int) -> set[str]:
    """The scheduler's kill lines (time limit, cancel) printed after srun said the job's tasks
    had already exited with a non-zero code or a crash signal of their own, no kill line before
    it: the allocation was killed after the failure (a job script that sleeps or waits on, or
    srun itself ending the step's other tasks), so the kill is not the cause; with them, srun's
    lines for the tasks it ended after "srun: Terminating ..."."""
    exited = next((i for i in failures if i >= start and "srun: error" in lines[i]
                   and _TASKS_EXITED.search(lines[i])), None)
    stopped = _stopped_by_srun(lines, exited) if exited is not None else set()
    kills = [i for i in failures if "srun: error" not in lines[i] and _kill_line(lines[i])]
    if not kills:
        return stopped
    if exited is not None and kills[0] > exited:
        return {lines[i] for i in kills} | stopped
    # a time limit or a cancel (not an OOM kill: that one names a cause) after a process died of
    # its own error
    limits = [i for i in kills if "oom" not in lines[i].lower()]
    if limits and died_before(lines, failures, limits[0]) is not None:
        return {lines[i] for i in limits} | stopped
    return stopped


def _kill_line(line: str) -> bool:
    """Whether ``line`` is a scheduler's kill of the job (Slurm's, LSF's, PBS's)."""
    return is_scheduler_kill(logs.normalize_line(line))


def _stopped_by_srun(lines: Sequence[str], exited: int) -> set[str]:
    """srun's lines for the tasks it ended ("task 1: Terminated", "Force Terminated job step") and
    slurmstepd's for the step it cancelled ("*** STEP 421.0 ON n7 CANCELLED AT ... ***", no
    reason) after its "srun: Terminating" line that follows the task failure at ``exited``."""
    term = next((k for k in range(exited + 1, min(len(lines), exited + _TERMINATE_SPAN))
                 if lines[k].startswith(_SRUN_TERMINATING)), None)
    if term is None:
        return set()
    return {ln for ln in lines[term + 1:] if ("srun: error" in ln and _STOPPED_TASKS.search(ln))
            or ln.startswith("srun: Force Terminated") or ("CANCELLED AT" in ln and "DUE TO" not in ln)}


#: Lines after a task's failure searched for srun's "Terminating" line.
_TERMINATE_SPAN = 20


def root_rank_lines(lines: Sequence[str], start: int, floor: int, rank: int | None,
                    context: Sequence[str]) -> list[str]:
    """The root-cause rank's own last traceback (its prefixed lines above ``start``) when it
    began above ``start`` and the context holds no traceback of that rank: torchrun's table
    names the rank that failed first, whose traceback may come before the other ranks'."""
    if rank is None or any(has_head(ln) and ranks.prefix_rank(ln) == rank for ln in context):
        return []
    lo = max(floor, start - ROOT_LOOKBACK)
    tb = next((i for i in range(start - 1, lo - 1, -1)
               if has_head(lines[i]) and ranks.prefix_rank(lines[i]) == rank), None)
    if tb is None:
        return []
    return [ln for ln in lines[tb:start] if ranks.prefix_rank(ln) == rank]
