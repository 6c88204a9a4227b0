"""How the whole-log reader turns the failed attempt's error context into a category: which
lines the classifier sees beside the first failing rank's own (the scheduler's and the
kernel's, which speak for the whole job)."""

from __future__ import annotations

from collections.abc import Sequence

from gpulens.diagnosis import logs
from gpulens.diagnosis.logread.lines import is_scheduler_kill

__all__ = ["job_lines", "late_kills"]

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


#: srun's line for tasks that ended on their own with a non-zero code.
_TASKS_EXITED = "Exited with exit code "


def late_kills(lines: Sequence[str], failures: Sequence[int], start: int) -> set[str]:
    """The scheduler's kill lines (time limit, cancel) printed after srun said the job's tasks
    had already exited with a non-zero code: the allocation was killed after the failure (a
    job script that sleeps or waits on), so the kill is not the cause."""
    exited = next((i for i in failures if i >= start and _TASKS_EXITED in lines[i]
                   and not lines[i].rstrip().endswith(_TASKS_EXITED + "0")), None)
    if exited is None:
        return set()
    return {lines[i] for i in failures if i > exited and "srun: error" not in lines[i]
            and is_scheduler_kill(logs.normalize_line(lines[i]))}
