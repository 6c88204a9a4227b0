"""The failed attempt's terminal failure lines: failure lines after the run's frontier, the
scheduler's kill lines anywhere in the attempt, a rank's error after which that rank printed no
progress, a dead driver, the job's last words and its stop reports; none when the job went on
after its last error line.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence

from gpulens.diagnosis import logs
from gpulens.diagnosis.keyscan import find_keys
from gpulens.diagnosis.logread import ranks
from gpulens.diagnosis.logread.end.after_error import printed_and_went_on, trial_after, went_on
from gpulens.diagnosis.logread.end.caught import handled_blocks
from gpulens.diagnosis.logread.end.completion import open_traceback
from gpulens.diagnosis.logread.end.drivers import dead_driver
from gpulens.diagnosis.logread.end.handler_stops import written_after_bar
from gpulens.diagnosis.logread.end.lastwords import last_words, missing_command
from gpulens.diagnosis.logread.end.run_end import GOING_ON, SCAN_LINES
from gpulens.diagnosis.logread.end.script_reports import after_work
from gpulens.diagnosis.logread.end.uncaught import HANDLED_LOOKBACK, process_exit, zero_exit
from gpulens.diagnosis.logread.lines import (
    ERROR_KEYS,
    KILL_KEYS,
    PROGRESS_KEYS,
    is_failure,
    is_progress,
    is_scheduler_kill,
    is_terminal_kill,
)
from gpulens.diagnosis.logread.tracebacks import TRACEBACK

__all__ = ["case_results", "recovered_record", "terminal_failures"]


def terminal_failures(lines: Sequence[str], a0: int, frontier: int, signals: Sequence[int]) -> list[int]:
    """Indexes of the attempt's terminal failure lines: failure lines after the frontier, and
    the scheduler's kill lines anywhere in the attempt (``signals``: the attempt's
    :func:`handler_stops.signal_reports`)."""
    found = {i for i in find_keys(lines, ERROR_KEYS, frontier) if is_failure(logs.normalize_line(lines[i]), lines[i])}
    # the scheduler's kill lines anywhere in the attempt, after the frontier too: Slurm appends
    # its line to a progress bar's unterminated "\r" line (tqdm writes no newline), where the
    # failure test, which reads a line's start, does not see it
    found.update(i for i in find_keys(lines, KILL_KEYS, a0)
                 if is_scheduler_kill(logs.normalize_line(lines[i])))
    found.update(_rank_failures(lines, max(a0, len(lines) - SCAN_LINES), frontier))
    found.update(dead_driver(lines, max(a0, len(lines) - SCAN_LINES)))
    found.update(last_words(lines, a0))
    found.update(_exit_report_at_end(lines, frontier))
    found.update(signals)
    found.update(written_after_bar(lines, a0, KILL_KEYS, is_scheduler_kill))
    found = {i for i in found if not after_work(lines, a0, i) and not recovered_record(logs.normalize_line(lines[i]))}
    found -= case_results(lines, found)
    found.update(missing_command(lines, a0, sorted(found)))
    if found:
        found -= handled_blocks(lines, max(a0, min(found) - HANDLED_LOOKBACK), len(lines))
        if found and not any(is_terminal_kill(logs.normalize_line(lines[i])) for i in found) \
                and (trial_after(lines, max(found)) or printed_and_went_on(lines, max(found))
                     or (went_on(lines, max(found)) and not open_traceback(lines, frontier))):
            return []  # the job went on after its last error line (as after progress): none ended it
    return sorted(found)


#: Non-blank lines after an exit report's exception line that still leave it the log's end (a job script's epilogue).
_AFTER_EXIT_REPORT = 3


def _exit_report_at_end(lines: Sequence[str], frontier: int) -> list[int]:
    """The exception line of the traceback the interpreter printed as it exited (:func:`uncaught.process_exit`) at the
    log's end, after ``frontier``, whatever the exception is called: a class the failure-line test does not know by its
    name (datasets' ``OfflineModeIsEnabled``, no "Error" in it) still ended the process."""
    heads = find_keys(lines, (TRACEBACK,), frontier)
    k = process_exit(lines, heads[-1]) if heads else None
    if k is None or sum(1 for ln in lines[k + 1:] if ln.strip()) > _AFTER_EXIT_REPORT:
        return []
    return [k]


#: A library's record of a failure it handles itself, which ends nothing:
#: TensorFlow's stream executor when a device allocation fails (stream_executor/cuda/cuda_driver.cc
#: ``GpuDriver::DeviceAllocate``: LOG(ERROR) "failed to allocate 4.00G (4294967296 bytes) from device:
#: CUDA_ERROR_OUT_OF_MEMORY: out of memory", then it returns nullptr and the BFC allocator retries smaller,
#: ``BFCAllocator::Extend``'s backpedal by 0.9; a real TF OOM raises ResourceExhaustedError "OOM when allocating
#: tensor", which stays a failure), the BFC allocator's own warning of such a retry (bfc_allocator.cc
#: ``AllocateRaw``: "... ran out of memory trying to allocate 586.12MiB with freed_by_count=0. The caller
#: indicates that this is not a failure, ..."). (vLLM's INFO "Shutdown initiated (timeout=0)", printed at every
#: shutdown, is no failure line at all: a timeout setting with its value, ``logs.is_hard_error``.)
_RECOVERED = re.compile(
    r"cuda_driver\.cc:\d+\] failed to allocate \S+ \(\d+ bytes\) from device: CUDA_ERROR_OUT_OF_MEMORY\b"
    r"|bfc_allocator\.cc:\d+\] Allocator \(\w+\) ran out of memory trying to allocate \S+ with freed_by_count=\d+\. "
    r"The caller indicates that this is not a failure")


#: A harness's record of one case's outcome, behind a status tag padded to a table's column ("[oom  ] cartnn  l3/3
#: C64 ... OutOfMemoryError:CUDA out of memory", "[FAIL ] test_x ..."): the harness caught the case's error and
#: printed it as that case's result, beside the other cases' "[ok   ]" rows of the same width.
_CASE_TAG = re.compile(r"^\[(?P<tag>[A-Za-z]{2,8})(?P<pad> *)\] \S")
#: Tags of a case that went right, in the rows beside a failed case's.
_OK_TAGS = frozenset({"ok", "OK", "pass", "PASS", "passed", "PASSED", "done", "DONE", "success", "SUCCESS"})


def case_results(lines: Sequence[str], found: Collection[int]) -> set[int]:
    """The lines of ``found`` that are a harness's records of one case's outcome (:data:`_CASE_TAG`): a tag padded to the
    width of a tag of a case that went right ("[ok   ]") on another row of the log."""
    tagged = {i: m for i in found if lines[i][:1] == "[" and (m := _CASE_TAG.match(lines[i])) is not None
              and m.group("tag") not in _OK_TAGS}
    if not tagged:
        return set()
    widths = {len(m.group(0)) for ln in lines if ln[:1] == "[" and (m := _CASE_TAG.match(ln)) is not None
              and m.group("tag") in _OK_TAGS}
    return {i for i, m in tagged.items() if len(m.group(0)) in widths}


def recovered_record(norm: str) -> bool:
    """Whether a (normalized) line is a library's record of a failure it handles itself (:data:`_RECOVERED`),
    or the exception line of a ``SystemExit`` with status 0 (:func:`uncaught.zero_exit`: a normal exit)."""
    return _RECOVERED.search(norm) is not None or zero_exit(norm)


def _rank_failures(lines: Sequence[str], lo: int, frontier: int) -> list[int]:
    """Failure lines before the frontier of a rank that printed no progress after them: in a
    multi-rank log the other ranks go on printing steps after the first rank failed, which moves
    the frontier past the root error."""
    if frontier <= lo or len({ranks.prefix_rank(ln) for ln in lines[-_RANK_SAMPLE:]} - {None}) < 2:
        return []  # not a multi-rank log with launcher prefixes
    progress: dict[int, list[int]] = {}
    for i in find_keys(lines, PROGRESS_KEYS, lo):  # a progress line holds one of them
        rank = ranks.prefix_rank(lines[i])
        if rank is not None and is_progress(lines[i]) and not ranks.strip_prefix(lines[i])[:1].isspace():
            progress.setdefault(rank, []).append(i)  # a traceback's code line ("step=step") is not progress
    out = []
    for i in find_keys(lines, ERROR_KEYS, lo, frontier):
        rank = ranks.prefix_rank(lines[i])
        if rank is None or not is_failure(logs.normalize_line(lines[i]), lines[i]):
            continue
        after = [k for k in progress.get(rank, []) if k > i]
        if len(after) < GOING_ON:
            out.append(i)
    return out


#: Lines at the end of a log whose prefixes tell a multi-rank log.
_RANK_SAMPLE = 300
