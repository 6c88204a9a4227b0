"""What after a completion message leaves the run's end normal: the errors its processes print while
they are torn down after the work (a DataLoader worker killed, a process group losing its peers, a
launcher's report of the exit), the scheduler's memory accounting, the job script's own commands failing
after the work, an error the job printed alike before and went on from.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import NamedTuple

from gpulens.diagnosis import logs
from gpulens.diagnosis.guarded import Guarded, remembered
from gpulens.diagnosis.keyscan import find_keys
from gpulens.diagnosis.logread.end.after_error import ranks_free, went_on
from gpulens.diagnosis.logread.end.completion_messages import (
    AT_EXIT,
    COMPLETION_COVER,
    STRONG_END,
    completion_strength,
)
from gpulens.diagnosis.logread.end.handler_stops import HANDLER_STOP
from gpulens.diagnosis.logread.end.progress_end import counters_end, last_refresh
from gpulens.diagnosis.logread.end.script_reports import script_report
from gpulens.diagnosis.logread.lines import is_failure, is_progress
from gpulens.diagnosis.logread.signals import ABSEIL_STOP
from gpulens.diagnosis.logread.tracebacks import has_head, thread_died

__all__ = ["CAUGHT_LOOKBACK", "SCRIPT_LOOKBACK", "TEARDOWN_LOOKBACK", "FinishedBefore", "caught_before", "finished_before",
           "script_ran_after", "shutdown_error"]

#: Errors a job's processes print while they are torn down after the work ended, when one
#: process exits before the others: torch's DataLoader reporting a worker the shutdown killed
#: (csrc/DataLoader.cpp "DataLoader worker (pid 4242) is killed by signal: Killed.",
#: utils/data/dataloader.py "DataLoader worker (pid(s) 4242, 4243) exited unexpectedly"), the
#: c10d store and the NCCL process group losing a peer that already exited (TCPStore's
#: "recvValue failed" / "Connection reset by peer" / "Broken pipe", the ProcessGroupNCCL heartbeat
#: monitor's 'Failed to check the "should dump" flag on TCPStore', DistNetworkError and
#: DistStoreError, NCCL's ncclRemoteError "remote process exited or there was a network error"
#: and ncclSystemError), and CUDA's cudaErrorCudartUnloading ("CUDA error: driver shutting down":
#: a CUDA call from a destructor at interpreter exit).
_TEARDOWN_ERROR = Guarded(
    r"DataLoader worker \(pid(?:\(s\))? [\d, ]+\) (?:is killed by signal|exited unexpectedly)"
    r"|Connection reset by peer|Broken pipe|BrokenPipeError|ConnectionResetError|TCPStore|recvValue failed"
    r"|should dump\W+flag|DistNetworkError|DistStoreError|ncclRemoteError|ncclSystemError"
    r"|remote process exited or there was a network error|driver shutting down|cudaErrorCudartUnloading",
    ("DataLoader worker", "Connection reset", "Broken pipe", "BrokenPipe", "ConnectionReset", "TCPStore", "recvValue",
     "should dump", "DistNetworkError", "DistStoreError", "ncclRemoteError", "ncclSystemError", "remote process exited",
     "driver shutting down", "cudaErrorCudartUnloading"),
)
#: How a process that a shutdown error above ends dies: the C++ runtime's abort on the uncaught
#: exception ("terminate called after throwing an instance of 'c10::Error'"), the shell's and
#: faulthandler's report of that abort.
_ABORTED_AFTER = Guarded(r"^terminate called after throwing an instance of|^Aborted(?: \(core dumped\))?$|\bAborted \(core dumped\)"
                   r"|^Fatal Python error: Aborted",
                   ("terminate called", "Aborted"))
#: A process ended by a signal sent from outside it (not a scheduler's limit, not a crash of its
#: own): bash's "Killed" / "Terminated" report, abseil's "*** SIGTERM received at time=..." (Ray
#: stops its actors so), torchrun's "Received Signals.SIGTERM death signal", its "exitcode : -9",
#: "Signal 15 (SIGTERM) received by PID 4242" and its agent's "SignalException: Process 4100 got
#: signal: 15".
_SENT_SIGNAL = Guarded(
    r"^(?:\S+: line \d+:\s+\d+\s+)?(?:Killed|Terminated)\b|" + ABSEIL_STOP.pattern +
    r"|[Rr]eceived (?:Signals\.)?SIG(?:TERM|KILL|INT|HUP)\b|[Rr]eceived \d+ death signal"
    r"|exitcode\s*:\s*-(?:1|2|9|15)\b|Signal (?:1|2|9|15) \(SIG(?:HUP|INT|KILL|TERM)\) received by PID"
    r"|SignalException: Process \d+ got signal: (?:1|2|9|15)\b|" + HANDLER_STOP.pattern,
    ("Killed", "Terminated", "received at time=", "eceived ", "exitcode", "received by PID", "SignalException",
     "signal SIGTERM", "signal SIGINT", "signal 15"),
)
#: A launcher's or a scheduler's report that a process exited non-zero (what it reports is the
#: shutdown error's consequence when nothing else failed): srun's "Exited with exit code",
#: DeepSpeed's "exits with return code", torchrun's failure report lines.
_EXIT_REPORT = Guarded(
    r"srun: error: .*Exited with exit code|exits with return code|exit(?:ed)? (?:with )?(?:code|status)\s*[:=]?\s*-?\d"
    r"|exitcode\s*:\s*-?\d|^(?:traceback|rank|host|local_rank|time|error_file)\s*:",
    ("xit", "traceback", "rank", "host", "time", "error_file"),
)
#: Slurm's report, at a step's end, that the step's memory cgroup reached its limit at some time
#: (task/cgroup plugin, src/plugins/task/cgroup/task_cgroup_memory.c ``task_cgroup_memory_check_oom``
#: of Slurm 15.08-17.02: "Exceeded step memory limit at some point." / "Exceeded job memory limit at
#: some point." when the cgroup's memory.failcnt or memory.memsw.failcnt is not zero). The fail count
#: grows whenever the kernel had to reclaim memory at the limit (the page cache of the files read
#: counts too); no process need have been killed. A kill is another line: the cgroup OOM killer's
#: count, "Detected 1 oom-kill event(s) in step 42.0 cgroup" (``oom_kill`` events, Slurm 17.11 on),
#: or jobacct_gather's "Job 42 exceeded memory limit (...), being killed".
_STEP_ACCOUNTING = re.compile(r"\bExceeded (?:step|job) memory limit at some point\b")
#: Lines before the first failure line searched for the completion message it came after.
TEARDOWN_LOOKBACK = 300


@remembered  # asked again about the same failure lines
def shutdown_error(norm: str) -> str | None:
    """What a (normalized, prefix-free) failure line is when it may come from a shutdown after the
    work: ``"teardown"`` (an error of the shutdown itself, ``_TEARDOWN_ERROR``), ``"signal"`` (a process
    ended by a signal sent from outside, ``_SENT_SIGNAL``), ``"report"`` (a launcher's report of
    a non-zero exit), ``"accounting"`` (the scheduler's memory accounting at the step's end,
    ``_STEP_ACCOUNTING``: no kill), or None (an error of the work: it did not end normally)."""
    if _TEARDOWN_ERROR.search(norm):
        return "teardown"
    if _STEP_ACCOUNTING.search(norm):
        return "accounting"
    if _SENT_SIGNAL.search(norm):
        return "signal"
    if logs.is_secondary(norm) or _EXIT_REPORT.search(norm):
        return "report"
    return None


class FinishedBefore(NamedTuple):
    """What :func:`finished_before` found: the completion message, its strength, and why the
    failure lines after it do not undo it (for the healthy verdict's reason)."""

    at: int  # the index of the completion message in the lines
    strength: float
    why: str


#: Why the failure lines after a completion message leave a run healthy, by what they were.
_WHY_SHUTDOWN = ("a completion message, and what failed after it is only the shutdown's (a worker or process "
                 "killed, a process group losing its peers, the launcher's report of that exit)")
_WHY_SCRIPT = ("a completion message, and what failed after it is only the job script's own commands "
               "(their errors and the script's non-zero exit), not the work")
_WHY_ACCOUNTING = ("a completion message, and after it only the scheduler's memory accounting at the step's end "
                   "(the memory limit was reached at some time; no process killed)")
#: Kinds of failure lines that only the teardown after the work prints: its own errors, and threads other than the
#: main one dying as the interpreter shuts down.
_AT_TEARDOWN = frozenset({"teardown", "thread"})
_WHY_THREAD = ("a completion message, and what failed after it is only threads other than the main one (their "
               "uncaught exceptions end those threads, not the process)")
_WHY_CAUGHT = ("a completion message, and the error lines after it were printed alike earlier in the job, "
               "which went on after them (an error its own code catches and prints)")


def finished_before(lines: Sequence[str], floor: int, failures: Sequence[int],
                    plain: Callable[[str], str]) -> FinishedBefore | None:
    """(index, strength) of a completion message printed before every failure line of the
    attempt (``failures``, sorted) when those lines are only what a shutdown prints after the
    work (:func:`shutdown_error`: a DataLoader worker or a process killed, a process group
    losing its peers, the launcher's report of the exit), at least one of them not a bare
    report, and the job printed no progress between the message and them (a progress bar's
    last refresh at its end aside): the work finished, its teardown failed. ``plain``: a
    line without its normalization's leftovers (a Ray prefix). None otherwise: an error of the
    work itself (a traceback in the final save), a report of a process that failed before the
    message, or more work after it."""
    if not failures:
        return None
    first = failures[0]
    ends = _strong_ends(lines, max(floor, first - max(SCRIPT_LOOKBACK, TEARDOWN_LOOKBACK)), first)
    if not ends:
        return None  # no completion message to have finished before (spares the kinds' and caught_before's scans)
    texts = [plain(logs.normalize_line(lines[i])).strip() for i in failures]
    kinds = _shutdown_kinds(lines, failures, texts, plain)
    if (marked := _caught_kinds(lines, failures, texts, kinds)) is None:
        return None
    kinds = marked
    script_exit = "report" in kinds and all(k == "report" or script_report(t) for k, t in zip(kinds, texts, strict=True))
    if None in kinds and not script_exit:
        return None  # (a bare non-zero exit, the shell's reports beside it: the job script's, when its commands ran after)
    lo = max(floor, first - (SCRIPT_LOOKBACK if script_exit else TEARDOWN_LOOKBACK))
    at_exit_too = set(kinds) <= _AT_TEARDOWN  # errors of the teardown alone: a tracker's exit lines came first
    done = next((i for i in reversed(ends) if i >= lo and (at_exit_too or not any(k in lines[i] for k in AT_EXIT))), None)
    if done is None:
        return None
    strength = ends[done]
    if script_exit:  # the job script's commands failed after the work (its summary lines are not more work)
        ok = script_ran_after(lines, done, failures[-1] + 1)
        return FinishedBefore(done, strength, _WHY_SCRIPT) if ok else None
    if any(is_progress(lines[k]) and counters_end(last_refresh(lines[k])) is not True for k in range(done + 1, first)):
        return None  # more work after the message: it ended one stage
    if not _AT_TEARDOWN & set(kinds) and sum(1 for k in range(done + 1, first) if lines[k].strip()) > _KILL_GAP:
        return None  # a bare kill some output after the message: maybe of work after it (a final test)
    return FinishedBefore(done, strength, _why_finished(kinds))


def _why_finished(kinds: Sequence[str | None]) -> str:
    """Why the failure lines of these kinds after a completion message leave the run healthy."""
    if "caught" in kinds:
        return _WHY_CAUGHT
    if set(kinds) == {"thread"}:
        return _WHY_THREAD
    return _WHY_ACCOUNTING if set(kinds) == {"accounting"} else _WHY_SHUTDOWN


def _shutdown_kinds(lines: Sequence[str], failures: Sequence[int], texts: Sequence[str],
                    plain: Callable[[str], str]) -> list[str | None]:
    """What shutdown error (:func:`shutdown_error`) each failure line (its ``texts``) is, None for
    none; beside a teardown error, an abort is its report. An exception a thread other than the main one
    died of (``tracebacks.thread_died``: "Exception in thread Thread-82:" above its traceback), and each
    copy of its text another thread printed beside it (interleaved, its head out of reach), is "thread":
    ``threading.excepthook`` prints it and ends that thread, not the process, whose exit status it leaves
    alone (CPython Lib/threading.py); after the work's end, a data loader's prefetch threads dying as the
    interpreter shuts down."""
    kinds = [shutdown_error(_what(lines, i, plain) or t) for i, t in zip(failures, texts, strict=True)]
    threads = {t for k, i, t in zip(kinds, failures, texts, strict=True) if k is None and thread_died(lines, i)}
    kinds = ["thread" if k is None and t in threads else k for k, t in zip(kinds, texts, strict=True)]
    if "teardown" in kinds:  # the abort such an error ends its process with reports it, no more
        kinds = ["report" if k is None and _ABORTED_AFTER.search(t) else k for k, t in zip(kinds, texts, strict=True)]
    return kinds


def _caught_kinds(lines: Sequence[str], failures: Sequence[int], texts: Sequence[str],
                  kinds: list[str | None]) -> list[str | None] | None:
    """``kinds`` with each unexplained failure line the job had printed alike before and gone on from
    marked "caught" (:func:`caught_before`); None at the first that is neither that nor a job script's
    report, which :func:`finished_before` would turn down anyway (spares the later lines' scans)."""
    out: list[str | None] = []
    for k, i, t in zip(kinds, failures, texts, strict=True):
        if k is None and caught_before(lines, i):
            k = "caught"
        elif k is None and not script_report(t):
            return None
        out.append(k)
    return out


def _strong_ends(lines: Sequence[str], lo: int, hi: int) -> dict[int, float]:
    """The completion messages in ``lines[lo:hi]`` strong enough for :func:`finished_before`, in order,
    with their strength."""
    found = ((i, completion_strength(logs.normalize_line(lines[i]))) for i in find_keys(lines, COMPLETION_COVER, lo, hi))
    return {i: strength for i, strength in found if strength >= STRONG_END}


#: Lines before an error line searched for the same line printed earlier.
CAUGHT_LOOKBACK = 20000
#: Earlier prints of that line (the latest) asked whether the job went on after them.
_CAUGHT_SEEN = 10


def caught_before(lines: Sequence[str], at: int) -> bool:
    """Whether the error line at ``at`` was printed alike before (in this attempt or an earlier launch
    of the same job) and the job went on after it there (:func:`went_on`): an error the job's own code
    catches and prints each time (``except KeyError as e: print(f"Error: {e}")`` after each of a sweep's
    trainings, printing "Error: 'eval_loss'"), which did not end the job before and is no sign that it
    ended it after the work's completion message this time."""
    text = logs.normalize_line(lines[at]).strip()  # copies printed with a timestamp or a logger's prefix match too
    key = text[:50]
    if len(key) < 8:
        return False
    earlier = [k for k in find_keys(lines, (key,), max(0, at - CAUGHT_LOOKBACK), at)
               if logs.normalize_line(lines[k]).strip() == text]
    return any(went_on(lines, k) for k in earlier[-_CAUGHT_SEEN:])


#: Lines before a bare exit report searched for the completion message (a multi-rank job's
#: teardown warnings, one per rank, and the job script's own summary come between).
SCRIPT_LOOKBACK = 1000
#: Distinct progress lines after the completion message that show more work (a second stage's loop,
#: its counter moving), not a job script's summary (one line, every rank printing it alike:
#: "elapsed time per iteration: 2953.8").
_MORE_WORK = 2


def script_ran_after(lines: Sequence[str], done: int, first: int) -> bool:
    """Whether the job script's shell or a utility it ran reported an error of its own (:func:`script_line`:
    bash's "line 371: out.csv: No such file or directory", coreutils' "rm: cannot remove 'tmp.txt': ...")
    between the completion message at ``done`` and the exit report before ``first``, and nothing else there
    is a failure line (other than exit reports) or more work (``_MORE_WORK`` distinct progress lines). The shell ran its next commands, so the program had exited after its completion
    message, and a script's exit status is its last command's (bash(1), "EXIT STATUS"; Slurm's srun
    reports a task's: "srun: error: node1: task 0: Exited with exit code 1"): the non-zero exit
    is the job script's own commands after the work, not the work's."""
    seen = False
    steps: set[str] = set()
    for k in range(done + 1, first):
        s = ranks_free(logs.normalize_line(lines[k]))
        if not s:
            continue
        if script_report(s):
            seen = True
        elif has_head(s) or (is_failure(s, lines[k]) and shutdown_error(s) != "report"):
            return False
        elif is_progress(lines[k]) and counters_end(last_refresh(lines[k])) is not True:
            steps.add(s)
    return seen and len(steps) < _MORE_WORK


#: Non-blank lines between the completion message and a bare kill (no shutdown error of its own
#: beside it) beyond which the kill may have ended more work than the shutdown.
_KILL_GAP = 5


def _what(lines: Sequence[str], i: int, plain: Callable[[str], str]) -> str | None:
    """The message of the C++ exception that the runtime's "terminate called after throwing an
    instance of ..." line at ``i`` reports (its next line, "  what():  CUDA error: ..."), or None."""
    if "terminate called after throwing" not in lines[i] or i + 1 >= len(lines):
        return None
    nxt = plain(logs.normalize_line(lines[i + 1])).strip()
    return nxt if nxt.startswith("what():") else None
