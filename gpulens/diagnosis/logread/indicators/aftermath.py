"""What the failing process printed that is not what ended its run: errors it went on after (it
caught them: ordinary output followed, a logger recorded them at warning level or logged them
and raised another, a loop printed them again; README rule R1), the exceptions a stop signal
raised after a scheduler's end of the job, its teardown after an uncaught exception, and spawned
helpers that died starting up (rules R6, C1).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from gpulens.diagnosis import logs
from gpulens.diagnosis.guarded import Prefiltered, remembered
from gpulens.diagnosis.keyscan import find_keys
from gpulens.diagnosis.logread import ranks
from gpulens.diagnosis.logread.indicators.copies import bare_shape, restates
from gpulens.diagnosis.logread.indicators.origins import COLLECTIVE_TIMEOUT
from gpulens.diagnosis.logread.indicators.runs import ended_uncaught, printing
from gpulens.diagnosis.logread.launches import spawned_child
from gpulens.diagnosis.logread.lines import (
    LSF_TERM,
    PBS_KILL,
    SLURM_REASON,
    is_failure,
    is_progress,
)
from gpulens.diagnosis.logread.records import names_level, warning_head
from gpulens.diagnosis.logread.signals import (
    FORWARD_KEY,
    abseil_stop,
    agent_death_signal,
    launcher_forward,
    signal_raised,
    sigterm_report,
    stop_report,
    workers_terminated,
)
from gpulens.diagnosis.logread.tracebacks import (
    EXCEPTION,
    TRACEBACK,
    chained,
    norm_body,
    python_head,
    thread_died,
    traceback_head,
    unprefixed,
)

__all__ = ["WENT_ON", "child_after_parent", "ended_from_outside", "killed_after_going_on", "logged_and_went_on", "logged_warning",
           "native_error_went_on", "printed_again", "recovered_from", "said_it_goes_on", "without_aftermath", "without_spawned",
           "without_teardown"]


def without_aftermath(own: list[int], region: Sequence[int], norm: Callable[[int], str],
                      lines: Sequence[str] = ()) -> list[int]:
    """``own`` without the exceptions the signal of a scheduler's end of the job (its time limit,
    preemption or cancel line in ``region``) or of torchrun's agent's ("Received Signals.SIGINT death signal,
    shutting down workers": torch/distributed/elastic/agent/server/api.py, the signal it got and passes on to
    its workers) or of abseil's report of a stop signal ("*** SIGTERM received at time=...") raised after that
    line (README rule R6); after Lightning's launcher passing a signal on (:func:`signals.launcher_forward`, looked
    for in ``lines``), also the data loader's report that it ended the workers and the exceptions being handled
    when those came (the chain they end)."""
    kill = next((i for i in region if ended_from_outside(norm(i))
                 or agent_death_signal(norm(i)) or abseil_stop(norm(i))), None)
    forward = _forwarded(lines, own)
    if forward is not None and (kill is None or forward < kill):
        return _without_signal_chains(lines, own, forward, norm)
    if kill is None:
        return own
    return [i for i in own if i <= kill or not signal_raised(ranks.strip_prefix(norm(i)).strip())]


def _forwarded(lines: Sequence[str], own: Sequence[int]) -> int | None:
    """The first line of Lightning's launcher passing a stop signal on before the last of ``own``, if any."""
    if not lines or not own:
        return None
    return next((i for i in find_keys(lines, (FORWARD_KEY,), max(0, own[0] - _FORWARD_REACH), own[-1])
                 if launcher_forward(lines[i])), None)


#: Lines above the first error line searched for a launcher passing a signal on.
_FORWARD_REACH = 400


def _without_signal_chains(lines: Sequence[str], own: list[int], kill: int, norm: Callable[[int], str]) -> list[int]:
    """``own`` without, after ``kill``, the exceptions a stop signal raised (:func:`signals.signal_raised`, a data
    loader's :func:`signals.workers_terminated`) and the earlier exceptions of the chains they end (those were
    being handled when the signal came: README rules R4, R6)."""
    out: list[int] = []
    dropping = False  # the line after the one looked at was dropped: an exception chained to it goes too
    for i in reversed(own):
        text = ranks.strip_prefix(norm(i)).strip()
        dropping = i > kill and (signal_raised(text) or workers_terminated(text)
                                 or (dropping and _chained_below(lines, i) and EXCEPTION.match(text) is not None))
        if not dropping:
            out.append(i)
    return out[::-1]


def _chained_below(lines: Sequence[str], i: int) -> bool:
    """Whether the first non-blank line below the exception line ``i`` is Python's chain marker."""
    below = next((ln for ln in lines[i + 1:i + 4] if ln.strip()), "")
    return chained(below)


def without_teardown(lines: Sequence[str], own: list[int], norm: Callable[[int], str]) -> list[int]:
    """``own`` without a stop signal's report that follows an uncaught exception of the same
    process (:func:`runs.ended_uncaught`) with no progress between: Python printed that traceback as
    the process ended, and the SIGTERM the launcher then sent it is teardown (README R6, O3;
    paddle.distributed.launch stops the workers still alive with ``proc.terminate()``); nor a data
    loader's report that the same SIGTERM ended its workers, after that report."""
    out: list[int] = []
    for n, i in enumerate(own):
        prev = out[-1] if out else None  # the last line kept (the traceback a report follows)
        report = own[n - 1] if n else None  # the line just before, kept or not (a dropped SIGTERM report)
        if prev is not None and not any(is_progress(ln) for ln in lines[prev + 1:i]) \
                and stop_report(norm(i)) and (ended_uncaught(lines, prev) or thread_died(lines, prev)):
            continue
        if report is not None and not any(is_progress(ln) for ln in lines[report + 1:i]) \
                and sigterm_report(norm(report)) and workers_terminated(norm(i)):
            continue
        out.append(i)
    return out


def without_spawned(lines: Sequence[str], own: list[int], region: Sequence[int],
                     norm: Callable[[int], str]) -> list[int]:
    """``own`` without its errors before a scheduler's end of the job (a time limit, a cancel in
    ``region``) when every one of them is a spawned child's death in its bootstrap
    (:func:`launches.spawned_child`): those helpers ended, the job went on until the scheduler
    ended it (README C1, R6)."""
    kill = next((i for i in region if ended_from_outside(norm(i))), None)
    before = [i for i in own if kill is not None and i < kill]
    if not before or not all(_spawn_exception(lines, i) for i in before):
        return own
    return [i for i in own if i not in before]


def _spawn_exception(lines: Sequence[str], i: int) -> bool:
    """Whether line ``i`` ends a spawned child's bootstrap traceback (its frames' paths read with "/", as Windows
    prints them with "\\": "C:\\Python312\\Lib\\multiprocessing\\spawn.py")."""
    head = traceback_head(lines, i)
    if head is None:
        return False
    return spawned_child([ln.replace("\\", "/") for ln in lines[head:i + 1]], 0, i - head)


def child_after_parent(lines: Sequence[str], i: int, own: Sequence[int]) -> bool:
    """Whether the exception line ``i`` ends a spawned child's bootstrap traceback (``spawn_main``) printed after an
    error of its parent in ``own``: the parent failed while starting it (Windows' ``spawn`` pickles the process object
    into the child's pipe; "Can't pickle local object" ends the parent, and the child reading that pipe fails
    "EOFError: Ran out of input" in ``reduction.pickle.load(from_parent)``, CPython Lib/multiprocessing/spawn.py
    ``_main``): another process's consequence, not the root (README rules R5, R7)."""
    return any(k < i and not _spawn_exception(lines, k) for k in own) and _spawn_exception(lines, i)


#: Lines of the failing process's own ordinary output between its last error line and a kill
#: that show it went on after the error (it caught it): the kill ended the run (rules R1, R6).
WENT_ON = 10


#: A scheduler's end of a job from outside: its time limit, a preemption, a node failure, a cancel.
_ENDED_FROM_OUTSIDE = Prefiltered(rf"{SLURM_REASON}|CANCELLED AT|{LSF_TERM}|{PBS_KILL}")


def killed_after_going_on(lines: Sequence[str], last: int, region: Sequence[int], norm: Callable[[int], str],
             mine: Callable[[int], bool]) -> bool:
    """Whether a scheduler's or the kernel's kill (a time limit, a cancel, ``Killed``) ends the
    attempt after the process printed WENT_ON lines of ordinary output since its last error line
    ``last``: the errors were caught and printed (a search loop's failed candidates), the kill
    is what ended the run."""
    kill = next((i for i in region if i > last and ended_from_outside(norm(i))), None)
    if kill is None:
        return False
    seen = 0
    for k in range(last + 1, kill):
        if lines[k].strip() and not lines[k][:1].isspace() and mine(k) and not is_failure(norm(k), lines[k]):
            seen += 1
            if seen >= WENT_ON:
                return True
    return False


def logged_warning(raw: str) -> bool:
    """Whether an exception line is printed under a logger's warning-level header (README rule R2:
    a warning is not the failure): torch._dynamo logs the exception of a graph it failed to compile with its
    traceback at warning level and runs the code uncompiled (``suppress_errors``), so the exception
    line that ends that record did not end the process."""
    body = unprefixed(raw)
    at = warning_head(body)
    return at is not None and EXCEPTION.match(logs.normalize_line(body[at:]).strip()) is not None


def logged_and_went_on(lines: Sequence[str], i: int, own: Sequence[int], norm: Callable[[int], str]) -> bool:
    """Whether the exception line ``i`` ends a traceback a logger printed under its ERROR or WARNING
    record (``logger.error(msg, exc_info=True)``, ``logger.exception(msg)``: the record's line right
    above "Traceback (most recent call last):") after which the same process raised another error
    in a traceback of its own, not chained to it, that does not restate it: the logged exception
    was caught and the program went on (README rule R1), the later one ended it."""
    if not EXCEPTION.match(norm_body(lines[i])):
        return False
    head = python_head(lines, i)
    if head is None or unprefixed(lines[head]).strip() != TRACEBACK + ":":
        return False
    record = next((k for k in range(head - 1, max(-1, head - 3), -1) if lines[k].strip()), None)
    if record is None or not names_level(unprefixed(lines[record])):
        return False
    said = bare_shape(norm(i))
    later = [j for j in own if j > i and EXCEPTION.match(norm_body(lines[j]))]
    return bool(later) and printing(lines, later[0], i) > i \
        and not any(restates(said, bare_shape(norm(j))) for j in later)


#: A native library's LOG(ERROR) record, which logs and returns (only a FATAL record aborts the process):
#: TensorFlow's and tsl's "2023-11-01 14:28:34.240756: E tensorflow/.../cuda_driver.cc:268] failed call to cuInit: ..."
#: (tsl/platform/default/logging.cc LogMessage::GenerateLogMessage: "%s.%06d: %c %s:%d] %s", the severity one of
#: "IWEF"), and glog's and abseil's "E1101 14:28:34.240756 4242 cuda_driver.cc:268] ..." (glog src/logging.cc
#: LogMessage::Init; abseil absl/log/internal/log_format.cc).
_NATIVE_ERROR = re.compile(r"^(?:\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: E|E\d{4} \d\d:\d\d:\d\d(?:\.\d+)?\s+\d+)"
                           r" [\w./-]+\.(?:cc|cpp|h):\d+\] ")


#: A library's error record that says, in the same message, that it recovered and goes on: YOLOX's label
#: assignment out of memory on the GPU, retried on the CPU (yolox/models/yolo_head.py ``get_losses``:
#: ``logger.error("OOM RuntimeError is raised due to the huge memory cost during label assignment. CPU mode is
#: applied in this batch. If you want to avoid this issue, try to reduce the batch size or image size.")``).
_RECOVERED = re.compile(r"OOM RuntimeError is raised due to the huge memory cost during label assignment\.\s+"
                        r"CPU mode is applied in this batch")


#: A launcher's own word, just below its error, that it goes on regardless: IBM Spectrum MPI's start-up (jsrun/mpirun on
#: Summit-class LSF systems) when its environment generator is missing ("Error: SMPI environment generator script not
#: found at:" / "Path : ..." / "Error: No such file or directory" / "Warning. Failed to setup the Spectrum MPI
#: environment." / "Continuing to launch. Beware, the Spectrum MPI environment may not be completely setup.").
_GOES_ON = re.compile(r"^Continuing (?:to launch|anyway)\b")
#: Non-blank lines below an error searched for that word.
_GOES_ON_REACH = 5


def said_it_goes_on(lines: Sequence[str], i: int) -> bool:
    """Whether one of the few non-blank lines below the error line ``i`` is its emitter's statement that it goes on
    (:data:`_GOES_ON`): README rule R1, the run went on after it (what failed later is the error)."""
    seen = 0
    for k in range(i + 1, min(len(lines), i + 3 * _GOES_ON_REACH)):
        text = unprefixed(lines[k]).strip()
        if not text:
            continue
        if _GOES_ON.match(text) is not None:
            return True
        seen += 1
        if seen >= _GOES_ON_REACH:
            return False
    return False


def recovered_from(norm: str) -> bool:
    """Whether a line is a library's record of an error it recovered from (:data:`_RECOVERED`): README rule R1,
    the run went on (what failed after it is the error)."""
    return "CPU mode is applied" in norm and _RECOVERED.search(norm) is not None


def native_error_went_on(lines: Sequence[str], i: int, own: Sequence[int], norm: Callable[[int], str]) -> bool:
    """Whether line ``i`` is a native library's LOG(ERROR) record (:data:`_NATIVE_ERROR`) after which its process
    printed WENT_ON lines of ordinary output and then raised an uncaught exception of its own (a later line of
    ``own`` ending a traceback that starts after that output): the library logged the error and the program went
    on (TensorFlow falls back to the CPU after "failed call to cuInit"; README rule R1), the exception ended it."""
    if _NATIVE_ERROR.match(unprefixed(lines[i])) is None or logs.is_secondary(norm(i)) \
            or COLLECTIVE_TIMEOUT.search(norm(i)) is not None:
        return False  # (a collective's timeout or a peer's loss is what ends the others: rules R5, R6)
    later = next((j for j in own if j > i and EXCEPTION.match(norm_body(lines[j]))), None)
    head = None if later is None else python_head(lines, later)
    if head is None or head <= i:
        return False
    rank, seen = ranks.prefix_rank(lines[i]), 0
    for k in range(i + 1, head):
        if lines[k].strip() and not lines[k][:1].isspace() and ranks.prefix_rank(lines[k]) == rank \
                and not is_failure(norm(k), lines[k]):
            seen += 1
            if seen >= WENT_ON:
                return True
    return False


#: Lines of ordinary output between two printings of one message that show the process went on between them.
_BETWEEN_COPIES = 3


def printed_again(lines: Sequence[str], own: Sequence[int], norm: Callable[[int], str]) -> set[int]:
    """The error lines of ``own`` that are messages printed without a traceback (a loop's ``except`` that prints
    "Evaluation failed: AssertionError('No data found')" and goes on) and one of several printings of that
    message with _BETWEEN_COPIES or more lines of ordinary output between two of them (the process went on
    after it: README rule R1; copies printed together are other processes' at one time, rule R5), when the
    same process later raised an uncaught exception that does not restate it, in a traceback of its own: that
    one ended the run. Each message's copies are judged once (a loop can print one message thousands of times)."""
    by_shape: dict[str, list[int]] = {}
    for j in own:
        by_shape.setdefault(bare_shape(norm(j)), []).append(j)
    out: set[int] = set()
    for said, copies in by_shape.items():
        if len(copies) > 1 and _went_on_after_copies(lines, own, norm, said, copies):
            out.update(i for i in copies if python_head(lines, i) is None)
    return out


def _went_on_after_copies(lines: Sequence[str], own: Sequence[int], norm: Callable[[int], str], said: str,
                          copies: Sequence[int]) -> bool:
    """Whether ordinary output lies between two of a message's ``copies`` and an uncaught exception of the
    same process that does not restate it (``said``: the message's shape) came after the last copy. Not across an
    uncaught exception of ``own`` between two copies: that one ended its process, the next copy is another run's
    (README rule R1: the runs are told apart by :func:`runs.split_runs`)."""
    if not any(_ordinary_between(lines, a, b) and not any(a < j < b and EXCEPTION.match(norm_body(lines[j]))
                                                          and ended_uncaught(lines, j) for j in own)
               for a, b in zip(copies, copies[1:], strict=False)):
        return False
    final = next((j for j in reversed(own) if j > copies[-1] and EXCEPTION.match(norm_body(lines[j]))), None)
    return final is not None and ended_uncaught(lines, final) and not restates(said, bare_shape(norm(final)))


def _ordinary_between(lines: Sequence[str], a: int, b: int) -> bool:
    """Whether _BETWEEN_COPIES or more non-blank, unindented lines that state no failure lie between ``a`` and
    ``b``."""
    seen = 0
    for k in range(a + 1, b):
        raw = lines[k]
        if raw.strip() and not raw[:1].isspace() and not is_failure(logs.normalize_line(raw), raw):
            seen += 1
            if seen >= _BETWEEN_COPIES:
                return True
    return False


@remembered  # asked about every failure line of a region, by several filters
def ended_from_outside(text: str) -> bool:
    """Whether a line is a scheduler's end of the job from outside (:data:`_ENDED_FROM_OUTSIDE`)."""
    return _ENDED_FROM_OUTSIDE.matches(text)
