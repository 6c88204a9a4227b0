"""The origin of a crash by a signal (a segfault, an abort) that printed no word of its own: unknown,
unless the job's shell reports one of the job's own programs crashed (the user's)."""

from __future__ import annotations

import re
from collections.abc import Sequence

from gpulens.diagnosis import logs
from gpulens.diagnosis.guarded import contains_any
from gpulens.diagnosis.logread.cause.answers import reorigin
from gpulens.diagnosis.logread.lines import (
    CORE_DUMPED,
    CRASH_SIGNALS,
    GLIBC_ERROR_IN,
    SHELL_JOB,
)
from gpulens.diagnosis.types import Diagnosis

__all__ = ["bare_crash", "own_program_crash"]


#: Rules whose evidence is only the signal or the exit status a native crash left: the shell's
#: "Segmentation fault (core dumped)", a launcher's "exitcode: -11", srun's "task 0: Segmentation
#: fault", mpirun's "exited on signal 11", torch's "DataLoader worker (pid N) is killed by signal:
#: Segmentation fault." (torch/utils/data/dataloader.py _MultiProcessingDataLoaderIter, from the
#: worker's exit signal only).
_BARE_CRASH_RULES = frozenset({"segfault", "abort-core-dump", "torchrun-child-signal", "mpirun-rank-signal",
                               "dataloader-worker-segfault"})


#: Literals of the lines in which the crashed code says what failed: libstdc++'s report of an
#: uncaught exception and its what() (an uncaught c10::Error), PyTorch's internal assert, glog's
#: check, glibc's heap checks, a fault handler's stack dump (CPython faulthandler, abseil, glog,
#: UCX's "Caught signal").
_CRASH_SAYS = ("terminate called", "what():", "INTERNAL ASSERT", "Check failed", "Fatal Python error", "*** Error in",
               "free(): ", "double free", "corrupted size", "Stack (most recent call first)", "Caught signal",
               "received by PID", "*** Aborted at", "Backtrace", "backtrace")


_crash_says = contains_any(_CRASH_SAYS)


def bare_crash(d: Diagnosis, lines: Sequence[str], floor: int) -> Diagnosis:
    """Origin ``unknown`` for a native crash the log shows only as a signal or an exit status (no
    library message, no stack dump, no frame in the last lines of the attempt, ``lines[floor:]``):
    who crashed, the job's own build, a library or a failing node, is not in the log (README
    "Origin: rules", O6). :func:`own_program_crash` then names the job's own program when the
    shell's line shows one."""
    if d.category != "crash" or d.rule_id not in _BARE_CRASH_RULES or d.origin == "unknown":
        return d
    if any(_crash_says(ln) for ln in [*d.evidence, *lines[max(floor, len(lines) - _CRASH_LOOKBACK):]]):
        return d
    why = "only a signal or an exit status: no message or stack of the code that crashed"
    return reorigin(d, "unknown", why)


#: The program a crash report names: bash's job-control line for a command a signal ended
#: ("script.sh: line 26: 158958 Aborted   (core dumped) ./simplex > out.log") and glibc's heap
#: check, which names the process by its argv[0] ("*** Error in `./simplex': corrupted size vs.
#: prev_size: 0x...", glibc 2.25 and older: malloc/malloc.c malloc_printerr).
_CRASHED = re.compile(rf"{SHELL_JOB}(?:{CRASH_SIGNALS})(?: +{CORE_DUMPED})? +(?P<cmd>\S.*)$|{GLIBC_ERROR_IN}")
_CRASH_LOOKBACK = 400


def own_program_crash(d: Diagnosis, lines: Sequence[str]) -> Diagnosis:
    """Origin ``user`` for a native crash of the job's own compiled program: the crash report
    names a program run from the working directory (``./simplex``, ``../bin/solver``), not an
    interpreter or a launcher whose crash is inside a framework (docs/diagnosis.md, "One origin
    convention": a crash's origin is where the failing code is)."""
    if d.category != "crash" or d.origin == "user":
        return d
    for line in [*d.evidence, *lines[-_CRASH_LOOKBACK:]]:
        if "line " not in line and "*** Error in" not in line:
            continue
        m = _CRASHED.search(logs.normalize_line(line).strip())
        if m is None:
            continue
        words = [w for w in (m.group("prog") or m.group("cmd")).split() if "=" not in w]
        prog = words[0] if words else ""
        if prog.startswith(("./", "../")) and not prog.endswith((".py", ".sh")):
            why = f"the crashed program {prog} is the job's own build"
            return reorigin(d, "user", why)
        return d
    return d
