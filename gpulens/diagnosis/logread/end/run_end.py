"""Where the last attempt's run ends: the frontier after which it printed too few progress lines to
have gone on (errors before it did not end the run), its last completion message after the last
failure line, and whether training went on after that message or a failure line ended the run
before it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from gpulens.diagnosis import logs
from gpulens.diagnosis.logread import ranks
from gpulens.diagnosis.logread.end.completion import open_traceback
from gpulens.diagnosis.logread.end.completion_messages import (
    AT_EXIT,
    COMPLETION_COVER,
    completion_strength,
)
from gpulens.diagnosis.logread.lines import (
    LSF_TERM,
    PROGRESS_KEYS,
    is_progress,
    is_terminal_kill,
    last_matching,
)
from gpulens.diagnosis.logread.tracebacks import EXCEPTION

__all__ = ["EARLIER_COMPLETION", "GOING_ON", "SCAN_LINES", "WEAK_AFTER_FAILURE", "completion_after", "ended_by",
           "frontier", "trained_after"]

#: Progress lines after an error line that show the job went on (the error did not end it).
GOING_ON = 3
#: Lines at the end of the last attempt searched for its terminal failure (a failure is
#: at the end of a log; an error with this many lines after it did not end the job, or the
#: lines after it say what did).
SCAN_LINES = 5000


def _at_exit(line: str) -> bool:
    """A line trackers print at process exit whatever the outcome."""
    return any(k in line for k in AT_EXIT)


def frontier(lines: Sequence[str], floor: int) -> int:
    """The index after which fewer than GOING_ON progress lines follow (errors before it did
    not end the job: it went on); the lines that go on an exception's message are no progress
    (:func:`_continues_message`)."""
    floor = max(floor, len(lines) - SCAN_LINES)
    got: list[int] = []
    hi = len(lines)
    while len(got) < GOING_ON:
        batch = last_matching(lines, PROGRESS_KEYS, _progress, floor, hi, GOING_ON)
        if not batch:
            break
        got += [i for i in batch if not _continues_message(lines, i)]
        hi = batch[-1]
    return got[GOING_ON - 1] + 1 if len(got) >= GOING_ON else floor


#: Lines above a progress-looking line searched for the exception line whose message it goes on.
_MESSAGE_LINES = 3


def _continues_message(lines: Sequence[str], i: int) -> bool:
    """Whether ``lines[i]`` goes on the message of an exception line just above it, unindented and with no blank line
    between (DDP's "Expected to have finished reduction ..." goes on "making sure all `forward` function outputs
    participate in calculating loss."): the message's words, not a step. A line with a number (a metrics record, "{'loss':
    0.8, ...}" printed right after a caught error) or a bar's refresh never is."""
    if "\r" in lines[i] or "%|" in lines[i] or any(c.isdigit() for c in lines[i]):
        return False
    for k in range(i - 1, max(-1, i - 1 - _MESSAGE_LINES), -1):
        text = ranks.strip_prefix(logs.normalize_line(lines[k]))
        if not text.strip() or text[:1].isspace():
            return False
        if EXCEPTION.match(text):
            return True
    return False


def _progress(line: str) -> bool:
    """A progress line, also without its launcher's rank prefix: behind the prefix a rank's
    traceback code line ("[rank0]:     self.engine.backward(loss, **kwargs)") does not start with
    the indentation that tells it from progress when no prefix is there."""
    if not is_progress(line):
        return False
    rest = ranks.strip_prefix(line)
    return rest is line or is_progress(rest)


def _completion(lines: Sequence[str], floor: int) -> tuple[int, float] | None:
    """(index, strength) of the last completion line at or after ``floor``."""
    got = last_matching(lines, COMPLETION_COVER, lambda ln: completion_strength(logs.normalize_line(ln)) > 0,
                        floor, len(lines))
    return (got[0], completion_strength(logs.normalize_line(lines[got[0]]))) if got else None


def completion_after(lines: Sequence[str], floor: int, failures: Sequence[int]) -> tuple[int, float] | None:
    """The last completion line after the last failure; a tracker's exit lines (printed whatever
    the outcome) count only when no failure line precedes them in the attempt's end."""
    done = _completion(lines, failures[-1] + 1 if failures else floor)
    while done is not None and failures and _at_exit(lines[done[0]]):
        done = _completion(lines[:done[0]], failures[-1] + 1)  # an earlier, real completion message?
    if done is not None and failures and done[1] < WEAK_AFTER_FAILURE:
        return None  # a bare "Done." after a failure the job did not go on from: the job script's echo
    return done


#: Confidence of a normal end told by a completion message after which training went on (a
#: sweep's or a multi-stage script's earlier stage) to an end that shows nothing more.
EARLIER_COMPLETION = 0.7


def trained_after(lines: Sequence[str], at: int, frontier: int) -> bool:
    """Whether the run printed GOING_ON or more progress lines after the completion line at
    ``at`` (the frontier is past it): the line did not end the run."""
    if frontier <= at + 1:
        return False
    return len(last_matching(lines, PROGRESS_KEYS, is_progress, at + 1, len(lines), GOING_ON)) >= GOING_ON


def ended_by(lines: Sequence[str], frontier: int, failures: Sequence[int], done: int) -> bool:
    """Whether a failure line ended the run before the completion line at ``done``: a kill, a
    signal, a non-zero exit, or a traceback's exception that ended its process, with no
    progress line between the last failure line and ``done`` (training going on after it shows
    the failure ended nothing), or the verdict of a scheduler's report that heads the job's output."""
    if _reported_ahead(lines, failures, done):
        return True
    if any(is_progress(ln) for ln in lines[failures[-1] + 1:done]):
        return False
    return any(is_terminal_kill(logs.normalize_line(lines[i])) for i in failures) or open_traceback(lines, frontier)


#: LSF's job report when it heads the job's output ("The output (if any) follows", ``bsub -o``'s report before the
#: output): written once the job had ended, its verdict ("TERM_RUNLIMIT: job killed after reaching LSF run time limit.")
#: holds for everything the output then shows, a round's "All that training took 1081.4 seconds" included.
_LSF_VERDICT = re.compile(LSF_TERM)
_LSF_HEADS_OUTPUT = "The output (if any) follows"
#: Lines from a report's verdict to its "The output (if any) follows" (its resource usage summary between).
_LSF_REPORT_TAIL = 60


def _reported_ahead(lines: Sequence[str], failures: Sequence[int], done: int) -> bool:
    """Whether a failure line before ``done`` is the verdict of an LSF report that heads the job's output."""
    return any(i < done and "TERM_" in lines[i] and _LSF_VERDICT.search(lines[i]) is not None
               and any(_LSF_HEADS_OUTPUT in ln for ln in lines[i + 1:min(done, i + _LSF_REPORT_TAIL)]) for i in failures)


#: Completion strength below which a completion line after a failure line does not count (a
#: bare word such as "Done." that a job script echoes whatever its program's exit status).
WEAK_AFTER_FAILURE = 0.9
