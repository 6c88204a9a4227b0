"""The cause behind a bare kill (SIGKILL, a script killed) or a fatal-signal handler's SIGTERM
report: a memory kill named elsewhere in the log, a process's own error that ended it first, or
no cause the log gives (origin unknown)."""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Sequence

from gpulens.diagnosis import logs
from gpulens.diagnosis.guarded import contains_any
from gpulens.diagnosis.keyscan import find_keys
from gpulens.diagnosis.logread import ranks
from gpulens.diagnosis.logread.cause.answers import (
    MAX_EVIDENCE,
    cause_of,
    evidence_line,
    reorigin,
    unknown_because,
)
from gpulens.diagnosis.logread.cause.diedbefore import (
    ABORT_HEAD,
    OWN_EXIT_CODE,
    ROOT_LOOKBACK,
    died_before_line,
    last_abort,
    last_death,
    own_cause,
    own_cause_in,
)
from gpulens.diagnosis.logread.end.caught import handled_blocks
from gpulens.diagnosis.logread.lines import is_progress
from gpulens.diagnosis.logread.signals import TERM_REPORT_KEYS
from gpulens.diagnosis.logread.tracebacks import starts_head
from gpulens.diagnosis.rules import Rule, load_rules, match_rules
from gpulens.diagnosis.types import Diagnosis

__all__ = ["STOP_KEYS", "first_stop", "stop_after_own_error", "teardown_term", "unattributed_kill"]


#: Rules whose evidence is a SIGKILL that names no sender (README "Origin: rules", O7): the shell's
#: "Killed", a launcher's exit code -9, a DataLoader worker "killed by signal: Killed".
_BARE_KILL_RULES = frozenset({"sigkill-exitcode", "slurm-script-killed", "launcher-child-sigkill",
                              "dataloader-worker-killed"})
#: Literals of the lines in which the kernel or a scheduler says it killed for memory (the kernel's
#: OOM killer, Slurm's cgroup, PBS's and LSF's memory limits, Kubernetes, Ray's memory monitor).
_MEMORY_KILLS = ("oom-kill", "oom_kill", "oom-killer", "OOMKilled", "Out of memory: Kill", "Memory cgroup out of memory",
                 "exceeded memory limit", "Exceeded job memory limit", "Exceeded step memory limit", "OUT_OF_MEMORY",
                 "job killed: mem", "job killed: vmem", "job killed: pmem", "TERM_MEMLIMIT", "memory pressure",
                 "Out Of Memory")
_names_a_memory_kill = contains_any(_MEMORY_KILLS)


def unattributed_kill(d: Diagnosis, lines: Sequence[str], floor: int) -> Diagnosis:
    """Origin ``unknown`` for a bare SIGKILL (``cpu_oom`` from the shell's "Killed", exit code -9)
    when no line of the attempt (``lines[floor:]``) says the kernel or the scheduler killed it for
    memory: the OOM killer is the likeliest sender, but an administrator, a watchdog or the user
    send SIGKILL too (README "Origin: rules", O7). With such a line the memory was the job's.
    Without one, a process's own traceback that ended it before the kill line (a launcher then
    killing the ranks that waited for it) is the cause (README R5). A SIGTERM a fatal-signal
    handler reports after the process's own traceback is read likewise (:func:`teardown_term`)."""
    d = stop_after_own_error(teardown_term(d, lines, floor), lines, floor)
    if d.category != "cpu_oom" or d.rule_id not in _BARE_KILL_RULES:
        return d
    if any(_names_a_memory_kill(ln) for ln in lines[floor:]):
        return d
    own = _own_error_before_kill(d, lines, floor)
    if own is not None:
        return own
    if d.origin == "unknown":
        return d
    why = "no oom-kill or memory-limit line says who sent the SIGKILL"
    return reorigin(d, "unknown", why)


def _own_error_before_kill(d: Diagnosis, lines: Sequence[str], floor: int) -> Diagnosis | None:
    """The answer of a process's own traceback (not one a signal or a lost peer makes) that ended
    before the bare kill line ``d`` read, with no progress after it; None when there is none."""
    kill = evidence_line(d, lines, floor)
    at = died_before_line(lines, floor, kill) if kill is not None else None
    cause = own_cause(lines, at) if at is not None else None
    if cause is None:
        return None
    return cause_of(d, cause, f"a process ended on its own error first ({cause.rule.id}); the SIGKILL the "
                               "launcher or the job then sent the others is its aftermath")


#: Rules whose evidence is a fatal-signal handler's report of a SIGTERM (glog's, which Paddle
#: installs: paddle/fluid/platform/init.cc SignalHandle prints "FatalError: `Termination signal`
#: is detected by the operating system." and "[SignalInfo: *** SIGTERM (@0x...) received by PID N
#: ... from PID M ***]"; abseil's "*** SIGTERM received at time=...").
_TERM_REPORT_RULES = frozenset({"fatal-signal-handler-term"})


def teardown_term(d: Diagnosis, lines: Sequence[str], floor: int) -> Diagnosis:
    """The process's own uncaught traceback when a fatal-signal handler's SIGTERM report ``d``
    read follows it with no progress between: Python prints the traceback of an uncaught
    exception only as the process ends, and a launcher that sees a worker fail stops the workers
    still alive with SIGTERM (paddle.distributed.launch: launch/controllers/controller.py
    ``watch`` -> ``pod.stop``, fleet/launch_utils.py ``terminate_local_procs``:
    ``proc.terminate()``), reaching this one while it shuts down. The traceback is the root
    (README C1, O3 "the root error's origin", R6)."""
    if d.category != "preempted" or d.rule_id not in _TERM_REPORT_RULES:
        return d
    reports = find_keys(lines, TERM_REPORT_KEYS, floor)
    if not reports:
        return d
    kill = reports[-1]
    at = died_before_line(lines, floor, kill)
    if at is None or any(k > at for k in _earlier_reports(reports, kill)):
        return d
    cause = own_cause(lines, at)
    if cause is None:
        return d
    return cause_of(d, cause, f"the process ended on its own error first ({cause.rule.id}); the SIGTERM "
                               "the launcher then sent it while it shut down is its aftermath")


def _earlier_reports(reports: Sequence[int], kill: int) -> list[int]:
    """The signal reports before the last one (``kill``): a traceback before one of them belongs
    to an earlier stop."""
    return [k for k in reports if k < kill - _REPORT_SPAN]


#: Lines a fatal-signal handler's report spans (its header, the summary, the signal line).
_REPORT_SPAN = 12


# round 25 kills
def stop_after_own_error(d: Diagnosis, lines: Sequence[str], floor: int) -> Diagnosis:
    """The process's own uncaught error when the stop ``d`` read (a rule of category ``preempted``)
    came after it, with no progress between and no stop before it (README C1, O3 "the root error's
    origin", R6): once one process has died of its own error, what stops the rest is its aftermath.
    The formats: torchrun's agent, reaching the workers still alive ("Sending process N closing
    signal SIGTERM", torch/distributed/elastic/multiprocessing/api.py ``_close``) or getting a
    signal itself ("Received Signals.SIGTERM death signal, shutting down workers",
    agent/server/api.py; ``SignalException: Process N got signal: 15``, multiprocessing/api.py
    ``_terminate_process_handler``); srun ending a step's other tasks after one failed ("srun:
    error: host: task 1: Terminated", src/srun launch ``_task_finish``); slurmstepd's cancel or time
    limit of a job whose process had already died but whose step or script hung on ("*** JOB N ON
    host CANCELLED AT ... [DUE TO TIME LIMIT] ***", src/slurmd/slurmstepd/req.c
    ``_handle_signal_container``); a SIGTERM handler's record in a rank the launcher stopped
    (Lightning's "[rank: 1] Received SIGTERM: 15", trainer/connectors/signal_connector.py).
    The error is a Python traceback's or the C++ runtime's abort report ("terminate called after
    throwing an instance of ...", its ``what():`` line naming the error: NCCL's watchdog timeout,
    a CUDA error). An error report Python printed and went on from (an exception ignored in ``__del__``, a
    logging error) ended nothing and is passed over."""
    if d.category != "preempted" or d.method != "rule" or d.rule_id in _TERM_REPORT_RULES:
        return d
    kill = evidence_line(d, lines, floor)
    found = _died_first(lines, floor, kill) if kill is not None else None
    if found is None:
        return _exited_first(d, lines, floor, kill) if kill is not None else d
    at, stop = found
    native = ABORT_HEAD in lines[at]
    cause = own_cause_in(lines, at, stop) if native else own_cause(lines, at)
    if cause is None:  # an error no rule names: not the stop's, and not known either
        own = logs.normalize_line(ranks.strip_prefix(lines[at])).strip()[:300]
        return unknown_because(dataclasses.replace(d, evidence=[own, *d.evidence][:MAX_EVIDENCE]),
                               "a process ended on its own error first, which no rule names; the stop that "
                               "reached the job after it is its aftermath")
    return cause_of(d, cause, f"a process ended on its own error first ({cause.rule.id}); the stop "
                               "that reached the job after it is its aftermath")


def _died_first(lines: Sequence[str], floor: int, kill: int) -> tuple[int, int] | None:
    """The exception line (or the C++ abort report) of a process's own error that ended it before
    the first stop line above or at ``kill``, followed directly by that stop or by the stop's own
    traceback (no frame of the error's report between: a stop printed inside an error's report, as JAX's callback error embeds the
    KeyboardInterrupt it caught, is that error's own cause), and not a report Python went on
    from, with that stop line's index; else None."""
    at = died_before_line(lines, floor, kill)
    at = last_death(lines, floor, kill) if at is None else at
    abort = last_abort(lines, floor, kill)
    if abort is not None and (at is None or abort > at):
        at = abort
    if at is None:
        return None
    lo = max(floor, at - ROOT_LOOKBACK)
    stop = first_stop(lines, lo, kill + 1)
    if stop is None or stop <= at or at in handled_blocks(lines, lo, at + 1):
        return None
    between = [ranks.strip_prefix(logs.normalize_line(ln)).lstrip() for ln in lines[at + 1:stop]]
    if any(t.startswith('File "') for t in between) and not any(starts_head(t) for t in between):
        return None  # the stop is inside the error's own report
    return at, stop


#: A launcher's report that one of its tasks ended with a non-zero exit code of its own (1-127:
#: not a signal's): srun's "srun: error: host: task 0: Exited with exit code 1" (src/srun
#: launch ``_task_finish``), torchrun's "failed (exitcode: 1) local_rank: 1 (pid: N) of binary: ..."
#: (torch/distributed/elastic/multiprocessing/api.py), DeepSpeed's "[...] exits with return code =
#: 1" (deepspeed/launcher/launch.py ``sigkill_handler``).
_TASK_EXIT = re.compile(rf"srun: error: \S+: tasks? [\d,-]+: Exited with exit code {OWN_EXIT_CODE}\b"
                       rf"|failed \(exitcode: {OWN_EXIT_CODE}\) local_rank: \d+"
                       rf"|exits with return code = {OWN_EXIT_CODE}\b")
_TASK_EXIT_KEYS = ("Exited with exit code ", "failed (exitcode: ", "exits with return code = ")


def _exited_first(d: Diagnosis, lines: Sequence[str], floor: int, kill: int) -> Diagnosis:
    """``unknown`` for the stop ``d`` read at line ``kill`` when a launcher said before the first
    stop line that one of its tasks had exited with an error code of its own (:data:`_TASK_EXIT`),
    with no progress between: the launcher or srun then stopped the others, or the job hung on to
    a limit (README O3, "srun/launcher tearing down the other tasks after one task failed"), and
    the log does not name that task's error; else ``d``."""
    lo = max(floor, kill - ROOT_LOOKBACK)
    exits = [i for i in find_keys(lines, _TASK_EXIT_KEYS, lo, kill) if _TASK_EXIT.search(lines[i])]
    stop = first_stop(lines, lo, kill + 1) if exits else None
    if stop is None or exits[0] > stop or any(is_progress(ln) for ln in lines[exits[0] + 1:stop]):
        return d
    line = logs.normalize_line(lines[exits[0]]).strip()[:300]
    return unknown_because(dataclasses.replace(d, evidence=[line, *d.evidence][:MAX_EVIDENCE]),
                           "a task exited with an error code of its own before the stop; the stop of the others "
                           "is its aftermath, and the log does not name that task's error")


#: Literals of the lines the ``preempted`` rules read (a scheduler's cancel, time limit, node failure or
#: preemption; a signal a process or a launcher reports; an interrupt; a pod's eviction, deadline or node
#: shutdown; a spot instance's interruption). Every such rule's example holds one (test_kills_round26), so
#: a rule added without its literal here fails a test instead of going unread.
STOP_KEYS = ("CANCELLED", "DUE TO", "TERM_", "PBS: job killed", "wall", "SIG", "ignal", "erminated", "nterrupt",
             "exitcode: -15", "return code = -15", "reempt", "Evicted", "TIMEOUT", "Hangup", "Node failure",
             "DeadlineExceeded")


@functools.lru_cache(maxsize=1)
def _stop_rules() -> tuple[Rule, ...]:
    """The specific rules of category ``preempted``."""
    return tuple(r for r in load_rules() if r.category == "preempted" and not r.generic)


def first_stop(lines: Sequence[str], lo: int, hi: int) -> int | None:
    """The index of the first line in ``lines[lo:hi]`` that a ``preempted`` rule reads, or None."""
    rules = _stop_rules()
    for i in find_keys(lines, STOP_KEYS, lo, hi):
        if match_rules(ranks.strip_prefix(logs.normalize_line(lines[i])), rules):
            return i
    return None
