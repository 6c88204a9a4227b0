"""What a scheduler's termination record says ended an attempt.

Kubernetes records why a container or pod ended (``OOMKilled``, ``Evicted``, ...) and the
exit code; importers store the reason in ``attempts.reason``. This module maps them to a
failure category (:data:`gpulens.vocab.CATEGORIES`) for the importers' metadata-only
verdicts and for the diagnosis, which joins them with what the log shows
(:mod:`gpulens.diagnosis.termination`).

Two kinds of reason:

* **decisive** (:data:`DECISIVE`): the platform ended the process for a cause outside the
  program (the container's memory limit, an eviction, a preemption). Whatever the log shows
  last, this is what ended the attempt.
* the others (``DeadlineExceeded``, a container that could not start, exit codes alone):
  the log comes first when it names a failure (a job that hangs in NCCL and then hits its
  deadline failed because of the hang), the record when the log shows nothing.
"""

from __future__ import annotations

from typing import Final

__all__ = ["DECISIVE", "REASONS", "SIGNALLED", "category_of"]

#: Termination / pod / event reasons -> failure category.
REASONS: Final[dict[str, str]] = {
    "OOMKilled": "cpu_oom",  # the container's memory limit (host memory; CUDA OOM shows as Error)
    "OOMKilling": "cpu_oom",  # node OOM killer (event)
    "Evicted": "preempted",
    "Preempted": "preempted",
    "Preempting": "preempted",
    "PreemptionByScheduler": "preempted",
    "DeadlineExceeded": "preempted",  # activeDeadlineSeconds, like Slurm's TIMEOUT
    "StartError": "cuda_env_error",
    "ContainerCannotRun": "cuda_env_error",
}
#: Reasons that say what ended the process whatever its log shows.
DECISIVE: Final[frozenset[str]] = frozenset(
    {"OOMKilled", "OOMKilling", "Evicted", "Preempted", "Preempting", "PreemptionByScheduler"})
#: Exit codes of a process ended by a signal: 137/143 killed from outside, the others a crash.
SIGNALLED: Final[dict[int, str]] = {137: "preempted", 143: "preempted", 134: "crash", 135: "crash",
                                    136: "crash", 139: "crash"}


def category_of(reason: str | None, exit_code: int | None) -> tuple[str, float]:
    """(category, confidence) for a termination reason and exit code; ('unknown', 0.2) when
    neither says anything."""
    if reason in REASONS:
        return REASONS[reason], 0.9
    if exit_code in SIGNALLED:
        return SIGNALLED[exit_code], 0.6
    return "unknown", 0.2
