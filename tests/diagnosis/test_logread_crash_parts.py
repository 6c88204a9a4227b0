"""The named parts of a native crash's report (lines.SHELL_JOB, ABORTED, CRASH_SIGNALS, CORE_DUMPED,
GLIBC_ERROR_IN, GLIBC_REASON): the indicator-line picker's abort lines (rootline) and the origin
decision's crashed program (decide) are built from them, so bash's and glibc's wording is known in
one place. Excerpts written for the test."""

from __future__ import annotations

import re

from gpulens.diagnosis.logread import diagnose_text
from gpulens.diagnosis.logread.lines import (
    ABORTED,
    ABORTED_ZH,
    CORE_DUMPED,
    CRASH_SIGNALS,
    GLIBC_ERROR_IN,
    GLIBC_REASON,
    SHELL_JOB,
)

_SHELL = "/var/spool/pbs/jobs/77.sched.SC: line 31: 40412 Aborted                 (core dumped) ./solver -n 64"
_SEGV = "run.sh: line 9: 5120 Segmentation fault      (core dumped) ../bin/lbm input.cfg"
_GLIBC = "*** Error in `./solver': free(): invalid next size (fast): 0x0000000001f3c010 ***"
_REASON = "malloc(): corrupted top size"


def test_each_part_reads_its_own_wording() -> None:
    assert re.search(SHELL_JOB + f"(?:{CRASH_SIGNALS})", _SHELL) and re.search(SHELL_JOB + f"(?:{CRASH_SIGNALS})", _SEGV)
    assert re.search(ABORTED, _SHELL) and not re.search(ABORTED, _SEGV) and re.search(CORE_DUMPED, _SEGV)
    assert not re.search(ABORTED, "AbortedCheckpoint saved") and ABORTED_ZH in "run.sh: 行 9: 5120 已放弃 (核心已转储)"
    m = re.search(GLIBC_ERROR_IN, _GLIBC)
    assert m is not None and m.group("prog") == "./solver"
    assert re.match(GLIBC_REASON, _REASON) and re.match(GLIBC_REASON, "*** stack smashing detected ***: terminated")
    assert not re.match(GLIBC_REASON, "free(): all buffers released")


def _crash_log(tail: list[str]) -> list[str]:
    return ["Reading mesh from input.cfg", *[f"iter {k} residual 1.2e-{k % 9}" for k in range(1, 60)], *tail]


def test_the_shell_s_abort_and_glibc_s_reason_above_it_are_the_indicator_lines() -> None:
    # rule R6: the line that says the process was killed (the shell's "Aborted") and the one that says why
    lines = _crash_log([_GLIBC, "======= Backtrace: =========", "/lib64/libc.so.6(+0x7c619)[0x7f3a1c27c619]", _SHELL])
    w = diagnose_text("\n".join(lines))
    assert [lines[n - 1] for n in w.indicator_lines] == [_GLIBC, _SHELL]


def test_the_crashed_program_is_the_job_s_own_build_by_glibc_s_name_for_it() -> None:
    lines = _crash_log([_GLIBC, _SHELL])
    w = diagnose_text("\n".join(lines))
    assert w.diagnosis.category == "crash" and w.diagnosis.origin == "user"
