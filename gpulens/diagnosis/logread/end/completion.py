"""How a job's last attempt ends when no failure line says it failed (:class:`End`): a counter at its
end, results, a job script's epilogue, or a stop in the middle of the run; and whether a traceback after
the attempt's start may have ended it (:func:`open_traceback`).

Only positive evidence counts: a log that merely stops is not healthy. A completion line
decides only when no terminal failure (a traceback that ended the process, a kill, a time
limit, a non-zero exit) comes after it. The parts it reads live in modules of one job each:
``completion_messages`` (the messages), ``progress_end`` (counters at their end), ``after_error``
(a job going on after an error), ``failed_runs`` (failed tallies and runner banners), ``uncaught``
(the process's exit on an uncaught exception), ``lastwords``, ``hydra``, ``handler_stops`` (how a
job ends without an error word), ``script_reports`` and ``shutdown`` (what after a completion leaves
its end normal). Callers import their names from those modules, not from here.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence

from gpulens.diagnosis import logs
from gpulens.diagnosis.keyscan import find_keys
from gpulens.diagnosis.logread.end.after_error import (
    CAUGHT_PRINT_WORDS,
    NOT_OUTPUT,
    printed_and_went_on,
    says_arning,
    trial_after,
    went_on,
)
from gpulens.diagnosis.logread.end.caught import handled_blocks
from gpulens.diagnosis.logread.end.failed_runs import (
    failed_run_line,
    failed_tally,
    runs_failed,
)
from gpulens.diagnosis.logread.end.progress_end import (
    LAST_EPOCH,
    LAST_STEP,
    at_configured_end,
    broke_at_configured_step,
    configured_totals,
    counters,
    counters_end,
    is_progress_bar,
    last_refresh,
    short_of_configured,
)
from gpulens.diagnosis.logread.end.uncaught import (
    HANDLED_LOOKBACK,
    ending_exception,
    exits_zero,
)
from gpulens.diagnosis.logread.lineprefix import prefix_free
from gpulens.diagnosis.logread.lines import (
    PROGRESS_KEYS,
    SERVER_STOPPED,
    answered_ok,
    last_matching,
)
from gpulens.diagnosis.logread.steplines import printed_before
from gpulens.diagnosis.logread.tracebacks import TRACEBACK

__all__ = ["End", "end_evidence", "end_of_attempt", "open_traceback"]



@dataclasses.dataclass(frozen=True)
class End:
    """How the last attempt of a log with no failure line ends: ``strength`` > 0 when it
    ended normally (that sure, ``why`` says from what), 0 when it stops in the middle of the run
    (no completion, no error: killed from outside or cut off); ``index``: the line that shows it."""

    index: int
    strength: float
    why: str
    #: ``index`` is a failure the log states (the exception of a run a batch runner counted as failed, an
    #: error message the job printed as its last words): the cause is there, to diagnose
    failed_run: bool = False
    #: a stop (strength 0) whose own line's format says a signal from outside ended the run, not who sent it
    #: (README O3: preempted, origin unknown)
    signalled: bool = False

    @property
    def stopped(self) -> bool:
        return self.strength == 0.0


#: A line that reports a result: a metric name with a number.
_RESULT = re.compile(
    r"(?i)(?<![a-z])(?:acc(?:uracy)?|top-?[15]|f1|auc|psnr|ssim|mIoU|mAP|dice|bleu|rouge\w*|wer|cer|perplexity|ppl|score"
    r"|precision|recall|loss|error rate|reward|return|average|mean|total|best|final|test|eval\w*|valid\w*|results?)"
    r"(?![a-z])[^\n]{0,80}?[:=|]?\s*[-+]?\d*\.?\d")
#: An error message's shape, which a result line does not have: a script that catches an
#: exception and logs it ("conversion failed: Error(s) in loading state_dict for ResNet:", then
#: torch's tab-indented "Missing key(s) in state_dict: ..." lists, module.py ``load_state_dict``)
#: prints numbers too, as does a job's own print of an exception it caught (``after_error.caught_print``:
#: "Error loading model: CUDA out of memory. Tried to allocate 1008.00 MiB"). A metric named for an error ("Mean Absolute Error: 0.12", "MeanSquaredError:
#: 0.01", "ERROR: 3.2%", "Error Rate") is a result, not this.
_ERROR_TEXT = re.compile(
    r"\b[A-Z]\w*(?:Error|Exception)(?:\(s\))?:\s*(?![-+]?[\d.])\S|\b[Ee]rror\(s\) in\b"
    rf"|\b[Ee]rror (?:while|when|during|occurred)\b|{re.escape(TRACEBACK)}|[Ff]ailed(?: to\b|:)"
    rf"|{CAUGHT_PRINT_WORDS}(?![-+]?[\d.])\S"
    r"|\bFAILED\b|[Mm]issing key\(s\)|[Uu]nexpected key\(s\)|失败[:：]|\bERROR\b(?:\]|:)?(?!\s*:?\s*[-+]?[\d.])")
#: A shell ``time`` wrapper's report (``real 1m2.3s``), or a job script's epilogue: the date or
#: an end banner printed after the program returned (a killed job prints neither).
_SCRIPT_EPILOGUE = re.compile(
    r"^real\s+\d+m[\d.]+s$|^(?:[A-Z][a-z]{2} ){2}[ \d]\d \d\d:\d\d:\d\d(?: [A-Z]{2,5})? \d{4}$"
    r"|^(?:Job |Run |Script )?(?:[Ee]nd(?:ed)?|[Ff]inish(?:ed)?|[Cc]omplet(?:ed)?)(?: time| at| on|:)\s*[:=]?\s*\S*\d")
#: A trainer's report of a Ctrl-C (SIGINT) it caught to stop early and save: Lightning's
#: ``_call_and_handle_interrupt`` (lightning/pytorch/trainer/call.py: "Detected KeyboardInterrupt,
#: attempting graceful shutdown ..."), and the ``except KeyboardInterrupt: logger.info("Training
#: interrupted by user")`` of training loops that then save an "interrupted" checkpoint and return:
#: the run did not reach its end, whatever it saves after.
_INTERRUPTED = re.compile(r"\b[Ii]nterrupted by (?:the )?user\b|\bDetected KeyboardInterrupt, attempting graceful shutdown")
#: Last non-blank lines read for it (uvicorn's own shutdown lines and the engine's teardown warnings follow it).
_SERVER_TAIL = 8
_TAIL = 12
#: Non-blank lines after the last progress line that still count as "the log ends in progress"
#: (a bar's last refresh is often printed twice, or followed by a blank tracker line).
_AFTER_PROGRESS = 2


def end_evidence(lines: Sequence[str], floor: int, progress: Sequence[int]) -> End | None:
    """How the attempt ``lines[floor:]`` (no failure line in it) ends, from its last lines:
    the last counter at its end (``Epoch 30/30``, ``step:6000/6000``, a bar at ``N/N``), a job
    script's epilogue (``time``'s report, the date), results after the last progress line that
    training did not print before; or it stops mid-run (its last lines are progress, short of
    the end, by more than the stride between its last two counters). ``progress``: the indexes of
    the last progress lines, latest first (empty: there is none)."""
    last_progress = progress[0] if progress else None
    tail = [i for i in range(max(floor, len(lines) - 4 * _TAIL), len(lines)) if lines[i].strip()][-_TAIL:]
    if not tail:
        return None
    stop = next((i for i in reversed(tail[-6:]) if _INTERRUPTED.search(last_refresh(lines[i]))), None)
    if stop is not None:
        return End(stop, 0.0, "the run was interrupted before its end: the job caught a Ctrl-C (SIGINT), reported it "
                              "and exited (stopped by a user or a scheduler's SIGINT).")
    special = _server_end(lines, floor, tail) or _oom_dump_end(lines, floor, tail)
    if special is not None:
        return special
    runs = runs_failed(lines, tail)
    if runs is not None and (failed := failed_run_line(lines, floor, runs)) != runs:
        return End(failed, 0.0, "the runner's closing summary counts runs that failed: the last failed run's "
                                "exception is the failure", failed_run=True)
    tally = failed_tally(lines, tail)
    if tally is None:
        tally = runs
    if tally is not None:
        return End(failed_run_line(lines, floor, tally), 0.0, "the job's closing summary counts runs or tests that failed: some of its work did "
                               "not end normally (the cause is in the failed run's own lines, if the log holds them).")
    epi = next((i for i in reversed(tail[-3:]) if _SCRIPT_EPILOGUE.search(last_refresh(lines[i]).strip())), None)
    if epi is not None:
        return End(epi, 0.8, "the job script went on after the program ended (its epilogue printed)")
    if last_progress is not None and last_progress >= floor:
        return _after_progress(lines, floor, progress, tail) or _ends_in_error(lines, tail)
    got = [i for i in tail[-6:] if _RESULT.search(last_refresh(lines[i])) and not _ERROR_TEXT.search(last_refresh(lines[i]))]
    if got and _short_counter(lines, tail, got[-1]):
        gone = next((i for i in tail if i > got[-1] and _TRACKER_LEAK.search(lines[i])), got[-1])
        return End(gone, 0.0, "the log stops in the middle of the run, short of the end its counter names,")
    return End(got[-1], 0.7, "it ends with its results") if got else _ends_in_error(lines, tail)


def _server_end(lines: Sequence[str], floor: int, tail: Sequence[int]) -> End | None:
    """How an inference server that shut down through its signal handler (:data:`SERVER_STOPPED`, among the last
    lines ``tail``) ended: normally when it had just answered its client's requests (:func:`_served_to_the_end`),
    else stopped from outside; None when it did not shut down so."""
    served = _server_stop(lines, floor, tail)
    if served is None:
        return None
    if _served_to_the_end(lines, floor, served):
        return End(served, 0.7, "the server answered its client's requests up to its shutdown: the job stopped it once "
                                "its work was done (a serving job's normal end)")
    return End(served, 0.0, "the server was stopped from outside: vLLM's signal handler (SIGINT or SIGTERM) "
                            "cancelled it and it shut down; who sent the signal is not in the log.", signalled=True)


#: A row of PyTorch's CUDA memory summary table (``torch.cuda.memory_summary``: rows framed by "|", rulers of "=" and
#: "-", the "PyTorch CUDA memory summary, device ID N" title), after a logger's prefix when it starts one.
_SUMMARY_ROW = re.compile(r"\|[ =\-]*(?:[^|\n]*\|)+\s*$")
#: An out-of-memory report that such summaries follow (fairseq's trainer prints one per device after "OOM: Ran out of
#: memory with exception: CUDA out of memory ..."; others after catching ``torch.cuda.OutOfMemoryError``).
_OOM_REPORT = re.compile(r"(?i)out of memory|OutOfMemoryError")
#: Summary rows passed over up the attempt's end (a summary has about 45 rows; one per device, and again at each retry).
_OOM_DUMP_REACH = 2500


def _oom_dump_end(lines: Sequence[str], floor: int, tail: Sequence[int]) -> End | None:
    """A stop at the out-of-memory report when the attempt ends in CUDA memory summaries (:data:`_SUMMARY_ROW`) printed
    right after it: a trainer that catches an OOM prints the summaries and retries, and one whose retry ran out of
    memory again re-raises (fairseq's ``Trainer.valid_step``: "ran out of memory in validation step, retrying batch",
    then ``raise e``); the traceback went to a stream this log does not hold. None when the attempt does not end so."""
    if not _SUMMARY_ROW.search(lines[tail[-1]]):
        return None
    k = tail[-1]
    while k > max(floor, tail[-1] - _OOM_DUMP_REACH) and (not lines[k].strip() or _SUMMARY_ROW.search(lines[k])):
        k -= 1
    report = next((i for i in range(k, max(floor, k - 2) - 1, -1) if _OOM_REPORT.search(lines[i])), None)
    if report is None:
        return None
    return End(_first_of_burst(lines, floor, report), 0.0, "the log ends in the CUDA memory summaries printed after an "
               "out-of-memory error: the run died of it there (its traceback went to another stream)", failed_run=True)


def _first_of_burst(lines: Sequence[str], floor: int, report: int) -> int:
    """The first out-of-memory report of the run of them that ends at ``report`` (each device's, and the retries',
    with their summaries and the trainer's warnings between): the root error, where the first device to run out
    printed it (R5)."""
    first = report
    for k in range(report - 1, max(floor, report - _OOM_DUMP_REACH) - 1, -1):
        text = lines[k]
        if _OOM_REPORT.search(text):
            first = k
        elif text.strip() and not _SUMMARY_ROW.search(text) and not says_arning(text):
            break
    return first


#: Lines above the attempt's end searched for a server's shutdown after which its job script printed lines of its own.
_SERVER_REACH = 80
#: What a serving process prints while it serves (not in a job script's own lines after the server stopped): an
#: access-log record of any route (uvicorn: ``'%(client_addr)s - "%(request_line)s" %(status_code)s'``), vLLM's
#: periodic engine statistics.
_SERVER_ACTIVE = re.compile(r'"(?:GET|POST|PUT|DELETE) /\S* HTTP/[\d.]+" \d{3}|Avg (?:prompt|generation) throughput')


def _server_stop(lines: Sequence[str], floor: int, tail: Sequence[int]) -> int | None:
    """The inference server's shutdown line (:data:`SERVER_STOPPED`): among the attempt's last lines, or up to
    ``_SERVER_REACH`` lines above its end when nothing after it is the server's activity (the job script that ran it
    printed its own lines after it stopped: a banner, how to query it); None when there is none."""
    served = next((i for i in reversed(tail[-_SERVER_TAIL:]) if SERVER_STOPPED.search(lines[i])), None)
    if served is not None:
        return served
    lo = max(floor, len(lines) - _SERVER_REACH)
    found = next((i for i in range(len(lines) - 1, lo - 1, -1)
                  if "FastAPI HTTP server" in lines[i] and SERVER_STOPPED.search(lines[i])), None)
    if found is None or any(_SERVER_ACTIVE.search(lines[k]) for k in range(found + 1, len(lines))):
        return None
    return found


#: vLLM's periodic engine statistics ("Avg prompt throughput: ... tokens/s, Avg generation throughput: ..., Running: 0
#: reqs", vllm/engine/metrics.py and v1/metrics/loggers.py ``LoggingStatLogger``), printed between requests and after them.
_ENGINE_STATS = ("Avg prompt throughput", "Avg generation throughput")
#: Statistics lines above a server's shutdown passed over to its last answered request (one every 10 s while it serves).
_STATS_REACH = 4
#: The engine process's own records of the same shutdown, printed just above the API server's (vLLM v1's
#: ``EngineCore`` ``core.py``: "Shutdown initiated (timeout=0)", "Shutdown complete").
_ENGINE_SHUTDOWN = ("] Shutdown initiated (timeout=", "] Shutdown complete")


def _served_to_the_end(lines: Sequence[str], floor: int, stop: int) -> bool:
    """Whether the last thing a stopped inference server did before its shutdown line ``stop`` was answer a model
    request with success (:func:`lines.answered_ok`; at most ``_STATS_REACH`` of its statistics lines in between): it
    was serving its client until the job stopped it, the way a prediction script stops the server it started once its
    last answer is in. A server stopped with no request answered, or idle or failing after its last answer, was
    stopped from outside (README O3)."""
    stats = 0
    for k in range(stop - 1, floor - 1, -1):
        text = lines[k]
        if not text.strip() or any(s in text for s in _ENGINE_SHUTDOWN):
            continue
        if any(s in text for s in _ENGINE_STATS) and stats < _STATS_REACH:
            stats += 1
            continue
        return answered_ok(text)
    return False


#: Python's multiprocessing resource tracker cleaning up after the processes that used it have all exited
#: (multiprocessing/resource_tracker.py ``main``: at its pipe's end of file it warns "resource_tracker: There
#: appear to be 30 leaked shared_memory objects to clean up at shutdown", likewise semaphore and folder
#: objects, for what no process unregistered): the job's processes were gone at that line.
_TRACKER_LEAK = re.compile(r"resource_tracker: There appear to be \d+ leaked \w+ objects to clean up at shutdown")


def _short_counter(lines: Sequence[str], tail: Sequence[int], at: int) -> bool:
    """Whether the result line at ``at`` (``tail``: the attempt's last non-blank lines) is a per-step
    report short of its end (``Iteration 31/208 | ... | Average: ...``, a line the progress test
    passes over), with at most ``_AFTER_PROGRESS`` lines after it: a run that stopped there, what it
    printed being the step's metrics, not final results. A counter one short of its end is a zero-based
    count's last step (``Iteration 207/208``), not short."""
    if len([i for i in tail if i > at]) > _AFTER_PROGRESS:
        return False
    shown = last_refresh(lines[at])
    before = next((last_refresh(lines[i]) for i in reversed(tail) if i < at and counters(last_refresh(lines[i]))), None)
    return counters_end(shown, before) is False and any(n + 1 < m for n, m, _ in counters(shown))


def _ends_in_error(lines: Sequence[str], tail: Sequence[int]) -> End | None:
    """A stop (strength 0) at the first of the error messages the attempt ends with (``tail``: its
    last non-blank lines): a script that caught an exception, logged it in words the failure
    lines do not read ("INT8 conversion failed: Error(s) in loading state_dict for Net:" and
    torch's key lists) and printed nothing more did not end normally; None when its last line is
    no error message (not a warning, not a tracker's line)."""
    run = []
    for i in reversed(tail):
        shown = last_refresh(lines[i]).strip()
        if not _ERROR_TEXT.search(shown) or says_arning(shown) or shown.startswith(NOT_OUTPUT):
            break
        run.append(i)
    return End(run[-1], 0.0, "the log ends with an error message the job printed itself (no exception line)",
               failed_run=True) if run else None


def _after_progress(lines: Sequence[str], floor: int, progress: Sequence[int], tail: Sequence[int]) -> End | None:
    """``end_evidence`` of an attempt that printed progress (``progress``: the last progress
    lines, latest first; ``tail``: its last non-blank lines)."""
    last = progress[0]
    shown = [last_refresh(lines[k]) for k in progress]
    reached = counters_end(shown[0], shown[1] if len(shown) > 1 else None)
    if reached is True:
        return End(last, 0.9, "the last progress line reached its end")
    numbered = [ln for ln in shown if LAST_EPOCH.search(ln) or LAST_STEP.search(ln)]
    totals = configured_totals(lines, floor) if numbered else {"epoch": set(), "step": set()}
    if numbered and (at_configured_end(numbered[0], totals) if reached is None
                     else broke_at_configured_step(numbered[0], totals)):
        return End(last, 0.85, "the last step printed is the configured last one")
    if numbered and short_of_configured(numbered[0], numbered[1] if len(numbered) > 1 else None, totals):
        reached = False  # short of the configured length
    results = _new_results(lines, floor, last, tail)
    if results is not None and reached is False and _CLOSED_IN_FINALLY.search(lines[results]):
        return End(results, 0.0, "the trainer's closing line (printed however training ended) follows a counter short "
                                 "of its end,")
    if results is not None:
        return End(results, 0.7, "results printed after the last step")
    if reached is False and len([i for i in tail if i > last]) <= _AFTER_PROGRESS:
        return End(last, 0.0, "the log stops in the middle of the run, short of the end its progress counter "
                              "or its configuration names,")
    return None


#: A trainer's closing line printed from a ``finally`` block, whether training ended or raised: YOLOX's ``Trainer.train``
#: (yolox/core/trainer.py: ``try: self.train_in_epoch() except Exception: raise finally: self.after_train()``, and
#: ``after_train`` logs "Training of experiment is done and the best AP is {:.2f}"). After a counter short of its end it
#: says the loop stopped, not that it finished (an interrupt's traceback goes to the console, not to the log file).
_CLOSED_IN_FINALLY = re.compile(r"Training of experiment is done and the best AP is")


def _new_results(lines: Sequence[str], floor: int, last_progress: int, tail: Sequence[int]) -> int | None:
    """The last result line after the last progress line that is not one training printed
    before (a per-epoch validation line repeats; a final test block is new)."""
    for i in reversed([i for i in tail if i > last_progress]):
        shown = last_refresh(lines[i]).strip()
        if shown.startswith("wandb:") or not _RESULT.search(shown) or _ERROR_TEXT.search(shown):
            continue
        if not printed_before(lines, floor, last_progress, shown):
            return i
    return None


#: Lines at the end of an attempt searched for its last progress lines (farther back, the
#: progress is over: the end is told by what follows it).
_END_LINES = 400


def end_of_attempt(lines: Sequence[str], floor: int) -> End | None:
    """How the attempt ``lines[floor:]`` with no failure line ends (see ``end_evidence``)."""
    got = last_matching(lines, PROGRESS_KEYS, is_progress_bar, max(floor, len(lines) - _END_LINES), len(lines), 2)
    return end_evidence(lines, floor, got)


def open_traceback(lines: Sequence[str], frontier: int) -> bool:
    """Whether a traceback after ``frontier`` may have ended the job: not one Python printed
    and went on from (an exception ignored in ``__del__``, a logging error), and not one the job
    went on printing its own output after to a positive end (a counter at its end, results), and
    not a failed trial's that a sweep runner caught and went on from (:func:`trial_after`), and not one
    that ends with a ``SystemExit`` with status 0 (:func:`uncaught.exits_zero`: a normal exit), nor one the
    job printed itself for an exception it caught and went on from (:func:`after_error.printed_and_went_on`)."""
    tbs = find_keys(lines, (TRACEBACK,), frontier)
    if tbs:
        handled = handled_blocks(lines, max(0, tbs[0] - HANDLED_LOOKBACK), len(lines))
        tbs = [i for i in tbs if i not in handled]
    if not tbs or exits_zero(lines, tbs[-1]):
        return False
    last = ending_exception(lines, tbs[-1])
    return not _went_on_to_an_end(lines, tbs[-1]) and not trial_after(lines, tbs[-1]) \
        and not (last is not None and printed_and_went_on(lines, last))


def _went_on_to_an_end(lines: Sequence[str], at: int) -> bool:
    """Whether the job went on printing its own output after the error line at ``at`` and
    its end after it shows a normal end (a counter at its end, new results, an epilogue): a
    traceback is surer evidence than an error-looking line, so more is asked to set it aside."""
    if not went_on(lines, at):
        return False
    end = end_of_attempt(lines, at)
    return end is not None and not end.stopped and (end.strength >= _END_PAST_TOP or not _from_top(lines, at))


#: How sure an end after a traceback from the top of the program (its outermost frame the script's
#: ``<module>``, as ``sys.excepthook`` prints an uncaught exception's) must be to set it aside: a counter at
#: its end, the configured last step, a job script's epilogue. Results alone are not enough: the
#: traceback goes to stderr at once, and Python flushes the buffered stdout (the last metrics, an
#: evaluation's lines) only at exit, after it, so a capture of both streams shows the run's last
#: results after the traceback that ended it (CPython Python/pylifecycle.c ``flush_std_files`` at
#: finalisation, after the hook printed the traceback). A traceback that a function caught and printed
#: (``traceback.print_exc()``: its outermost frame is that function's) is set aside by results too.
_END_PAST_TOP = 0.8
#: Lines after a traceback's header read for its outermost frame.
_FIRST_FRAME = 3


def _from_top(lines: Sequence[str], at: int) -> bool:
    """Whether the traceback whose header is at ``at`` starts at the script's top level (its first
    frame line ends "in <module>")."""
    for k in range(at + 1, min(len(lines), at + 1 + _FIRST_FRAME)):
        s = prefix_free(logs.normalize_line(lines[k])).strip()
        if s.startswith('File "'):
            return s.endswith("in <module>")
    return False


