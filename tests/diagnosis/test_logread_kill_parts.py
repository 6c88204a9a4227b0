"""The named parts of the kill lines (lines.SLURM_REASON, SLURM_JOB, LSF_TERM, OOM_KILLED,
KERNEL_OOM): the scheduler-kill test and the indicator-line picker's patterns are built from
them, so a scheduler's or the kernel's wording is known in one place. Excerpts written for the test."""

from __future__ import annotations

import re

from gpulens.diagnosis.logread import diagnose_text
from gpulens.diagnosis.logread.lines import (
    KERNEL_OOM,
    LSF_TERM,
    OOM_KILLED,
    SLURM_JOB,
    SLURM_REASON,
    is_scheduler_kill,
)

_LIMIT = "slurmstepd: error: *** JOB 81 ON g3 CANCELLED AT 2024-05-01T10:00:00 DUE TO TIME LIMIT ***"
_STEP = "slurmstepd: error: *** STEP 81.0 ON g3 CANCELLED AT 2024-05-01T10:00:00 DUE TO TIME LIMIT ***"
_RUNLIMIT = "TERM_RUNLIMIT: job killed after reaching LSF run time limit."
_CGROUP = "slurmstepd: error: Detected 1 oom-kill event(s) in StepId=55.0. Some of your processes may have been killed."
_KERNEL = "[812345.678] Out of memory: Killed process 4242 (python) total-vm:81234567kB"


def test_each_part_reads_its_own_wording() -> None:
    assert re.search(SLURM_REASON, _LIMIT) and re.search(SLURM_JOB, _STEP) and re.search(LSF_TERM, _RUNLIMIT)
    assert re.search(OOM_KILLED, _CGROUP) and re.search(OOM_KILLED, "Last State: Terminated  Reason: OOMKilled")
    assert re.search(KERNEL_OOM, _KERNEL) and not re.search(OOM_KILLED, _KERNEL)
    assert not re.search(SLURM_REASON, "slurmstepd: error: *** JOB 81 ON g3 CANCELLED AT 2024-05-01T10:00:00 ***")


def test_the_scheduler_kill_is_the_scheduler_s_and_the_cgroup_s_not_the_kernel_s_line() -> None:
    for line in (_LIMIT, _STEP, _RUNLIMIT, _CGROUP):
        assert is_scheduler_kill(line), line
    assert not is_scheduler_kill(_KERNEL)  # the kernel's report says why, it is not a kill line of its own


def test_the_job_and_its_step_cancelled_by_the_time_limit_are_one_line() -> None:
    # the picker's copies test blanks "*** JOB 81" and "*** STEP 81.0" alike: one cause line (R5, R9)
    lines = [f"epoch 3 step {k} loss 0.41" for k in range(300, 340)] + [_STEP, _LIMIT]
    w = diagnose_text("\n".join(lines))
    assert [lines[n - 1] for n in w.indicator_lines] == [_STEP]
