"""Whole-log diagnosis: healthy or failed first, then the failure-indicating lines (1-based,
as ``grep -n``), the label decided from the error context around them, the first failing rank
and node, the phase and step, and what is new in the last of several appended attempts.

The classifier (rules, then the SVM) only ever sees the failed attempt's error context: the
lines from the first terminal failure line to the end, without progress lines. The progress
bars, config dumps and metric lines before it never reach it.

The checks run on the classifier's answer for that context each live in a module of their own job:

- joblines: the lines the classifier sees beside the first failing rank's own;
- lineprefix: the per-line prefixes removed before it reads them;
- divergence, earlier, badrecord, heldmemory, childexit, readerthread: the cause printed before or
  behind what it read (a diverged loss, an earlier stage's failure, one bad record, a GPU held
  elsewhere, a child's own error behind a launcher's report, Paddle's data reader thread's error);
- timeouts, stops, damaged, kills, crashes: who a timeout, an outside stop, a damaged file, a
  bare kill or a bare crash is owed to;
- answers and diedbefore: the answers those checks give, and whether a process died first.

Where the run ends and which lines ended it are read by run_end and terminal; the first failing
rank and node by failing (with origins and ranks).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Sequence
from typing import Any

from gpulens.diagnosis import logs
from gpulens.diagnosis.classifier import Classifier, whole_classifier
from gpulens.diagnosis.hints import hint_for
from gpulens.diagnosis.logread import calibration, ranks
from gpulens.diagnosis.logread.attempts import attempt_starts, new_in_last
from gpulens.diagnosis.logread.cause.badrecord import bad_record
from gpulens.diagnosis.logread.cause.childexit import behind_secondary
from gpulens.diagnosis.logread.cause.crashes import bare_crash, own_program_crash
from gpulens.diagnosis.logread.cause.damaged import damaged_file
from gpulens.diagnosis.logread.cause.divergence import (
    DIVERGED_CONFIDENCE,
    diverged_before,
    stopped_on_nan,
)
from gpulens.diagnosis.logread.cause.earlier import earlier_root
from gpulens.diagnosis.logread.cause.heldmemory import held_elsewhere
from gpulens.diagnosis.logread.cause.kills import unattributed_kill
from gpulens.diagnosis.logread.cause.readerthread import reader_thread_root
from gpulens.diagnosis.logread.cause.stops import unnamed_stop
from gpulens.diagnosis.logread.cause.timeouts import (
    died_before_timeout,
    preparing_data,
    unattributed_timeout,
)
from gpulens.diagnosis.logread.end.after_error import site_report
from gpulens.diagnosis.logread.end.caught import drop_caught
from gpulens.diagnosis.logread.end.completion import End, end_of_attempt, open_traceback
from gpulens.diagnosis.logread.end.drivers import driver_report
from gpulens.diagnosis.logread.end.failed_runs import closed_after_failed_stage
from gpulens.diagnosis.logread.end.handler_stops import signal_reports
from gpulens.diagnosis.logread.end.run_end import (
    EARLIER_COMPLETION,
    completion_after,
    ended_by,
    trained_after,
)
from gpulens.diagnosis.logread.end.run_end import frontier as run_frontier
from gpulens.diagnosis.logread.end.shutdown import finished_before
from gpulens.diagnosis.logread.end.terminal import terminal_failures
from gpulens.diagnosis.logread.end.uncaught import process_exit
from gpulens.diagnosis.logread.indicators import rootline
from gpulens.diagnosis.logread.indicators.chains import failure_point
from gpulens.diagnosis.logread.indicators.failing import (
    NormCache,
    failing_host,
    failing_rank,
    first_failing,
    from_origin,
    node_line,
)
from gpulens.diagnosis.logread.indicators.markers import is_report_head
from gpulens.diagnosis.logread.indicators.origins import (
    interleaved,
    secondary_lines,
)
from gpulens.diagnosis.logread.indicators.runs import relaunched
from gpulens.diagnosis.logread.indicators.secondary import Secondary, summarize
from gpulens.diagnosis.logread.joblines import job_lines, late_kills, root_rank_lines
from gpulens.diagnosis.logread.lineprefix import ray_free, strip_line_prefixes, strip_ray_prefixes
from gpulens.diagnosis.logread.lines import is_progress, line_shape, shapes_above
from gpulens.diagnosis.logread.phase import phase_of
from gpulens.diagnosis.logread.phase.steps import last_step, own_step
from gpulens.diagnosis.logread.source import WholeText, read_whole, text_source
from gpulens.diagnosis.logread.story import story
from gpulens.diagnosis.logread.tracebacks import TRACEBACK, chain_start, has_head
from gpulens.diagnosis.rules import Rule, load_rules, match_rules
from gpulens.diagnosis.types import DEFAULT_ORIGIN, Diagnosis
from gpulens.vocab import NO_FAILURE

__all__ = ["MAX_CONTEXT_LINES", "MAX_INDICATORS", "SVM_MIN_CONFIDENCE", "WholeDiagnosis", "diagnose_file",
           "diagnose_path", "diagnose_source", "diagnose_text"]

MAX_INDICATORS = 6
#: Below this confidence a model-decided (SVM) answer is ``unknown``. Chosen out of sample by
#: ``gpulens diagnose --evaluate --whole-logs``: per fold (5, grouped by project) on the other
#: folds, 0.55 was chosen for 101 of the 131 projects and 0.45 for the other 30 when it was set
#: (docs/diagnosis-evaluation.md, whole-log section); the majority value is kept. On the 1,430 logs
#: of stop 48 every fold chose 0.55 (on the 1,423 before them, every fold 0.50).
SVM_MIN_CONFIDENCE = 0.55
#: Lines of error context given to the classifier (the first and the last of a longer one).
MAX_CONTEXT_LINES = 1200


@dataclasses.dataclass
class WholeDiagnosis:
    """The diagnosis of one whole log, with what an operator needs to check it."""

    diagnosis: Diagnosis
    indicator_lines: list[int] = dataclasses.field(default_factory=list)
    indicators: list[str] = dataclasses.field(default_factory=list)
    first_rank: int | None = None
    first_node: str | None = None
    #: the 1-based line that names ``first_node`` when no indicator line does (a scheduler's report, a banner)
    first_node_line: int | None = None
    phase: str = NO_FAILURE
    step: str | None = None
    #: the lines other ranks, processes and launchers printed after the root error: how many, which ranks or
    #: nodes printed what, whether processes were stopped by a signal (:class:`secondary.Secondary`)
    secondary: Secondary = Secondary()
    attempts: int = 1
    new_in_attempt: list[str] = dataclasses.field(default_factory=list)
    n_lines: int = 0
    #: (line number, text) of the line that shows a normal end, for a healthy verdict
    completion: tuple[int, str] | None = None

    @property
    def secondary_lines(self) -> int:
        return self.secondary.count

    def story(self) -> str:
        """One sentence an operator can check against the log."""
        return story(self)

    def as_diagnosis(self) -> Diagnosis:
        """The diagnosis with what was read from the log filled in (first rank/node, lines, phase,
        step, story)."""
        return dataclasses.replace(self.diagnosis, first_rank=self.first_rank, first_node=self.first_node,
                                   indicator_lines=list(self.indicator_lines),
                                   phase=None if self.diagnosis.healthy else self.phase, step=self.step,
                                   story=self.story())

    def to_dict(self) -> dict[str, Any]:
        return {
            "indicator_lines": list(self.indicator_lines),
            "first_rank": self.first_rank,
            "first_node": self.first_node,
            "first_node_line": self.first_node_line,
            "phase": self.phase,
            "step": self.step,
            "secondary_lines": self.secondary_lines,
            "secondary_ranks": list(self.secondary.ranks),
            "secondary_nodes": list(self.secondary.nodes),
            "secondary_kind": self.secondary.kind,
            "attempts": self.attempts,
            "new_in_attempt": list(self.new_in_attempt),
            "story": self.story(),
        }


def diagnose_path(path: str | os.PathLike[str], clf: Classifier | None = None, *,
                  min_confidence: float = SVM_MIN_CONFIDENCE, calibrated: bool = True) -> WholeDiagnosis:
    """Diagnose one log file (``unknown`` with a reason when it cannot be used); ``calibrated``:
    the confidence from the shipped calibration table, else as the reader states it."""
    name = str(path)
    try:
        src = read_whole(path)
    except OSError as exc:
        return _unusable(logs.unreadable_reason(exc), name)
    if src.reason:
        return _unusable(src.reason, name)
    return diagnose_source(src, clf, file=name, min_confidence=min_confidence, calibrated=calibrated)


def diagnose_file(path: str | os.PathLike[str]) -> Diagnosis:
    """``diagnose_path(path).as_diagnosis()`` with the default classifier (the job diagnosis'
    log reader)."""
    return diagnose_path(path).as_diagnosis()


def diagnose_text(text: str, clf: Classifier | None = None, *, file: str | None = None,
                  min_confidence: float = SVM_MIN_CONFIDENCE, calibrated: bool = True) -> WholeDiagnosis:
    """Diagnose one log given as text (``calibrated`` as :func:`diagnose_path`)."""
    if not text.strip():
        return _unusable("empty log", file)
    return diagnose_source(text_source(text), clf, file=file, min_confidence=min_confidence, calibrated=calibrated)


def _unusable(reason: str, file: str | None) -> WholeDiagnosis:
    return WholeDiagnosis(Diagnosis("unknown", "unknown", 0.0, method="none", reason=reason, file=file),
                          phase="unknown")


def diagnose_source(src: WholeText, clf: Classifier | None = None, *, file: str | None = None,
                    min_confidence: float = SVM_MIN_CONFIDENCE, calibrated: bool = True) -> WholeDiagnosis:
    """Diagnose the lines ``src`` holds (line numbers from ``src.first``); a model-decided
    answer below ``min_confidence`` (as stated) is ``unknown``; ``calibrated``: the answer's
    confidence from the shipped calibration table (:mod:`calibration`)."""
    got = _diagnose(src, clf, file, min_confidence)
    return _calibrate(got, calibration.shipped()) if calibrated else got


def _calibrate(w: WholeDiagnosis, table: calibration.Calibration) -> WholeDiagnosis:
    """``w`` with its confidence calibrated by ``table`` (an ``unknown``, and a healthy verdict without
    positive evidence, keep their own: :func:`calibration.calibrates`)."""
    d = w.diagnosis
    if not calibration.calibrates(d.category, d.confidence):
        return w
    return dataclasses.replace(w, diagnosis=dataclasses.replace(d, confidence=table.confidence(d.method, d.confidence)))


def _diagnose(src: WholeText, clf: Classifier | None, file: str | None, min_confidence: float) -> WholeDiagnosis:
    lines = src.lines
    if not any(ln.strip() for ln in lines):
        return _unusable("empty log", file)
    starts = attempt_starts(lines)
    a0 = starts[-1]
    frontier = run_frontier(lines, a0)
    signals = signal_reports(lines, a0)
    failures = terminal_failures(lines, a0, frontier, signals)
    done = completion_after(lines, a0, failures)
    if done is not None and failures and ended_by(lines, frontier, failures, done[0]):
        done = None  # the process died there: what prints "done" after it is the job script, not the run
    elif done is not None and failures and (report := closed_after_failed_stage(lines, failures, done[0])) is not None:
        # the runner's banner after its last command failed: its report of that command is the failure
        # line, and the error context starts there (what the command printed as it failed follows it)
        failures, done, frontier = sorted({report, *(i for i in failures if i > report)}), None, report
    earlier = None
    if done is not None and trained_after(lines, done[0], frontier):
        earlier, done = done, None  # training went on after it: one stage of several, or printed during the run
    base = WholeDiagnosis(Diagnosis("unknown", "unknown", 0.0), attempts=len(starts), n_lines=src.n_lines)
    if done is not None and not [i for i in failures if i > done[0]]:
        return _healthy(base, src, done, file, floor=a0)
    if done is None and not failures and not open_traceback(lines, frontier):
        # no failure line at all in the last attempt: how does it end?
        end = end_of_attempt(lines, a0)
        if end is not None and end.failed_run:  # a failure the log states (a failed run's exception, the job's last error message) decides
            return _abstain(_failed(base, src, starts, end.index, [end.index], [], clf or whole_classifier(), file),
                            min_confidence)
        if end is not None and end.stopped:
            return _stopped_mid_run(base, src, end, starts, file, clf.rules if clf is not None else load_rules())
        if end is None and earlier is not None:
            return _healthy(base, src, (earlier[0], EARLIER_COMPLETION), file,
                            "a completion message earlier (one stage of the job), no failure after it", floor=a0)
        return _healthy(base, src, (end.index, end.strength) if end else (_last_line(lines), 0.55), file,
                        end.why if end else None, floor=a0)
    finished = finished_before(lines, a0, failures, ray_free) if done is None else None
    if finished is not None:
        return _healthy(base, src, (finished.at, finished.strength), file, finished.why, floor=a0)
    got = _failed(base, src, starts, frontier, failures, signals, clf or whole_classifier(), file)
    return _abstain(got, min_confidence)


def _abstain(w: WholeDiagnosis, min_confidence: float) -> WholeDiagnosis:
    """``unknown`` for a model-decided answer below ``min_confidence`` (lines kept)."""
    d = w.diagnosis
    if d.method != "svm" or d.category == "unknown" or d.confidence >= min_confidence:
        return w
    why = f"the model's best guess {d.category} has p={d.confidence:.2f} < {min_confidence:.2f}; cause not determinable"
    return dataclasses.replace(w, diagnosis=Diagnosis("unknown", "unknown", d.confidence, list(d.evidence),
                                                      method="svm", reason=why, file=d.file))


#: Lines before the first indicator line that tell its phase (the traceback above it).
_AROUND = 80


def _last_line(lines: Sequence[str]) -> int:
    return next((i for i in range(len(lines) - 1, -1, -1) if lines[i].strip()), len(lines) - 1)


#: Confidence of a stop whose own line says a signal from outside ended the run (not who sent it).
SIGNALLED_STOP = 0.6


def _stopped_mid_run(base: WholeDiagnosis, src: WholeText, end: End, starts: Sequence[int], file: str | None,
             rules: tuple[Rule, ...]) -> WholeDiagnosis:
    """``unknown`` (failed, cause not in the log) for a log that stops mid-run with no error
    and no completion: killed from outside (a time limit, a preemption, a node failure) without
    a word, or still running when it was copied; a stop whose own line names who stopped it (a
    trainer's report of a caught Ctrl-C: README O4) is that rule's ``preempted``."""
    lines = src.lines
    line = logs.normalize_line(lines[end.index]).strip()[:300]
    why = end.why if end.why.endswith(".") else (
        f"{end.why} with no error and no completion message: killed from outside (time limit, "
        "preemption, node failure) or still running; cause not in the log")
    step = last_step(lines, end.index + 1, starts[-1])
    d = Diagnosis("unknown", "unknown", 0.0, [line], method="completion", reason=why, file=file)
    named = next((m for m in match_rules(line, rules) if m.rule.category == "preempted"
                  and not m.rule.generic and not m.rule.secondary), None)
    if named is not None:
        d = Diagnosis("preempted", named.rule.origin, named.rule.confidence, [line], rule_id=named.rule.id,
                      hint=named.hint, file=file, reason=f"the run was stopped and its last line says by whom ({named.rule.id})")
    elif end.signalled:  # its line's format says a signal stopped it, not whose (README O3)
        d = Diagnosis("preempted", "unknown", SIGNALLED_STOP, [line], method="completion", file=file, reason=why)
    region = [logs.normalize_line(x) for x in lines[max(starts[-1], end.index - _AROUND):end.index + 1]]
    phase = phase_of(lines, end.index + 1, region, starts[-1], step)
    return dataclasses.replace(base, diagnosis=d, indicator_lines=[src.number(end.index)], indicators=[line],
                               phase=phase, step=own_step(phase, step))


def _healthy(base: WholeDiagnosis, src: WholeText, done: tuple[int, float], file: str | None,
             why: str | None = None, *, floor: int = 0) -> WholeDiagnosis:
    """The normal end at ``done`` (line index, strength), ``why`` it is one; but ``model_diverged`` when
    that end is an early stop that fired because the loss had turned NaN (:func:`_stopped_on_nan`;
    ``floor``: the attempt's first line)."""
    i, strength = done
    if (nan := stopped_on_nan(src.lines, floor, i)) is not None:
        return _stopped_on_nan(base, src, nan, floor, file)
    line = logs.normalize_line(src.lines[i]).strip()[:300]
    if why is None and strength < calibration.NO_EVIDENCE:  # nothing positive: say so, and how to confirm it
        reason = ("probably ended normally: no error, no kill and no sign it stopped mid-run, but no completion "
                  "message or final counter either (confirm with the scheduler's exit code, e.g. sacct)")
    else:
        reason = "the run ended normally: " + (why or ("a completion message, no failure after it" if strength >= 0.8
                                                       else "no failure line, and it ends with its results"))
    d = Diagnosis(NO_FAILURE, NO_FAILURE, round(strength, 3), [line], method="completion", file=file, reason=reason)
    return dataclasses.replace(base, diagnosis=d, completion=(src.number(i), line),
                               step=last_step(src.lines, i + 1))


def _stopped_on_nan(base: WholeDiagnosis, src: WholeText, nan: tuple[int, int], floor: int,
                    file: str | None) -> WholeDiagnosis:
    """``model_diverged``: the run's early stopper ended it after its loss had turned NaN
    (:func:`divergence.stopped_on_nan`); the first NaN reading and the stop are its lines."""
    first, stop = nan
    shown = [logs.normalize_line(src.lines[k]).strip()[:300] for k in (first, stop)]
    d = Diagnosis("model_diverged", DEFAULT_ORIGIN["model_diverged"], DIVERGED_CONFIDENCE, shown, method="rule",
                  file=file, hint=hint_for("model_diverged", shown[:1]),
                  reason="the run stopped early because its loss had turned NaN/inf (every reading from the first "
                         "NaN to the stop), not because it had converged")
    step = last_step(src.lines, stop, floor)
    return dataclasses.replace(base, diagnosis=d, indicator_lines=[src.number(k) for k in (first, stop)],
                               indicators=shown, phase="training", step=own_step("training", step))


def _context(lines: Sequence[str], start: int, first: ranks.Origin) -> list[str]:
    """The error context the classifier sees: ``lines[start:]`` without progress lines and
    without the lines of ranks other than the first failing one (their errors are secondary),
    nor the untagged lines printed among the other ranks' lines after the first one's first
    prefixed error line (:func:`origins.interleaved`: a logger without a prefix may be any
    rank's), bounded. The first rank's own prefixed lines are kept wherever they are: the rest
    of its traceback and its final exception line often come after other ranks' lines."""
    skip = interleaved(lines, start, first)
    leftover = _leftovers(lines, start)

    def kept(k: int) -> bool:
        ln = lines[k]
        return not is_progress(ln) and from_origin(ln, first) and not (skip[0] < k <= skip[1]
                                                                  and ranks.origin_of(ln) == ranks.Origin()) \
            and not leftover(k)

    stop = site_report(lines, start)  # a site's end-of-job report (RAM and GPU memory tables) is not the job's error
    stop = len(lines) if stop is None else stop
    ctx = [lines[k] for k in _ends(kept, start, stop, MAX_CONTEXT_LINES // 3, 2 * MAX_CONTEXT_LINES // 3)]
    if first.rank is not None:  # one process's output now: its prefix names no other rank
        ctx = [ranks.strip_prefix(ln) for ln in ctx]
    return ctx


#: Non-blank lines above an uncaught exit's traceback whose shapes mark the run's leftover output after it.
_LEFTOVER_SHAPES = 20


def _leftovers(lines: Sequence[str], start: int) -> Callable[[int], bool]:
    """Whether a line after the uncaught exit the error context starts with (a traceback the
    interpreter printed as it exited, :func:`process_exit`, its header within the context's first
    lines) is the same run's leftover output: the shape of a line printed just above the traceback
    (DataLoader workers' per-sample prints going on while the main process exits), or blank. Such
    lines tell nothing of the failure; hundreds of them push the traceback out of the classifier's view."""
    head = next((k for k in range(start, min(len(lines), start + 4)) if lines[k].rstrip() == TRACEBACK + ":"), None)
    end = process_exit(lines, head) if head is not None else None
    if head is None or end is None:
        return lambda k: False
    shapes = shapes_above(lines, head, _LEFTOVER_SHAPES) - {""}
    return lambda k: k > end and (not lines[k].strip() or line_shape(lines[k]) in shapes)


def _ends(kept: Callable[[int], bool], start: int, stop: int, head: int, tail: int) -> list[int]:
    """The indexes ``k`` in ``[start, stop)`` for which ``kept(k)``: all of them when at most
    ``head + tail`` are, else the first ``head`` and the last ``tail`` (the lines between are
    never tested)."""
    first: list[int] = []
    for k in range(start, stop):
        if kept(k):
            first.append(k)
            if len(first) > head + tail:
                break
    else:
        return first
    last: list[int] = []
    for k in range(stop - 1, first[head - 1], -1):
        if kept(k):
            last.append(k)
            if len(last) == tail:
                break
    return first[:head] + last[::-1]


def _region_start(lines: Sequence[str], frontier: int, failures: Sequence[int]) -> int:
    """Where the failed attempt's error context starts: its first terminal failure line or the
    traceback that holds it (a few lines before), or the first traceback of the chain it ends."""
    if not failures:
        return max(frontier, len(lines) - logs.TAIL_LINES)
    first = failures[0]
    floor = min(frontier, first)
    tb = next((k for k in range(first, max(floor, first - 400) - 1, -1)
               if has_head(lines[k])), first)
    return max(floor, chain_start(lines, min(tb, first), floor) - 2)


def _failed(base: WholeDiagnosis, src: WholeText, starts: Sequence[int], frontier: int,
            failures: list[int], signals: Sequence[int], clf: Classifier, file: str | None) -> WholeDiagnosis:
    lines = src.lines
    start = _region_start(lines, frontier, failures)
    launch = relaunched(lines, start, failures)  # the last launch's lines, for the rank and the lines
    first = first_failing(lines, failures, launch)
    ctx = _context(lines, start, first)
    driver = driver_report(lines, max(starts[-1], start - _AROUND)) if failures else None
    if driver is not None and driver[0] <= failures[0] < driver[1]:  # the driver died: its report, not the workers'
        ctx = list(lines[driver[0]:driver[1]])
    ctx = root_rank_lines(lines, start, starts[-1], first.rank, ctx) + ctx
    late = late_kills(lines, failures, start)
    late |= {ranks.strip_prefix(ln) for ln in late}  # as the context holds them once one rank's
    # a stop that reads like progress (the attempt's signal reports at or after the context's start)
    ends = [lines[i] for i in signals if i >= start and lines[i] not in ctx]
    ctx = drop_caught(strip_line_prefixes(strip_ray_prefixes([ln for ln in ctx + job_lines(lines, failures, start, ctx)
                                                              + ends if ln not in late])))
    d = clf.classify_text("\n".join(ctx), file=file, keep_final=True)
    d = diverged_before(d, lines, starts[-1], start, SVM_MIN_CONFIDENCE)
    d = died_before_timeout(d, lines, starts[-1], failures, clf.rules)
    d = held_elsewhere(earlier_root(d, lines, starts[-1], start, clf.rules), lines, starts[-1], start)
    d = bad_record(d, lines, starts[-1], start)
    d = behind_secondary(d, lines, starts[-1], start, lambda text: clf.classify_text(text, file=file, keep_final=True),
                         failures[-1] + 1 if failures else None)
    d = reader_thread_root(d, lines, starts[-1], start, lambda text: clf.classify_text(text, file=file, keep_final=True))
    d = unattributed_kill(unnamed_stop(d, lines), lines, starts[-1])
    d = preparing_data(unattributed_timeout(d), lines, starts[-1], failures, clf.rules)
    d = damaged_file(own_program_crash(bare_crash(d, lines, starts[-1]), lines))
    if not failures and d.category != "unknown":
        d.confidence = round(d.confidence * 0.8, 3)
    primary, first = _indicators(lines, launch, failures, d.evidence, first)
    secondary = secondary_lines(lines, failures, primary, first, NormCache(lines, start).get)
    # where it failed: the first error line, not a report's header above it
    root = next((i for i in primary if not is_report_head(lines[i])), None)
    at = failure_point(lines, primary[0] if root is None else root) if primary else len(lines) - 1
    region = [logs.normalize_line(x) for x in lines[max(start, at - _AROUND):at + 3]]
    step = last_step(lines, at, starts[-1])
    good = starts[-2] if len(starts) > 1 else None
    rank = failing_rank(lines, starts[-1], first, primary[0] if primary else None)
    node = first.node or failing_host(lines, starts[-1], lines[primary[0]] if primary else None)
    others = summarize(lines, secondary, ranks.Origin(rank, node), clf.rules, "" if root is None else lines[root])
    named = node_line(lines, node, primary, starts[-1]) if node else None
    return dataclasses.replace(
        base, diagnosis=d, indicator_lines=[src.number(i) for i in primary],
        indicators=[logs.normalize_line(lines[i]).strip()[:300] for i in primary], first_rank=rank, first_node=node,
        first_node_line=None if named is None else src.number(named),
        phase=(phase := phase_of(lines, at, region, starts[-1], step)), step=own_step(phase, step),
        secondary=others, new_in_attempt=new_in_last(lines, starts, good))


def _indicators(lines: Sequence[str], start: int, failures: Sequence[int], evidence: Sequence[str],
                first: ranks.Origin) -> tuple[list[int], ranks.Origin]:
    """Indexes of the lines that show the root failure (:func:`rootline.pick_lines`): the first
    failing rank's (``first``) error lines, the evidence's, the kills and the launcher's verdict
    lines; and that rank/node (when ``first`` names none: the one those lines show first)."""
    norm = NormCache(lines, start)
    found = rootline.pick_lines(lines, start, failures, evidence, first, norm.get, MAX_INDICATORS)
    if first == ranks.Origin():  # no failing rank known: the lines of the one they show first
        first = first_failing(lines, found, start)
        found = [i for i in found if from_origin(lines[i], first)] or found
    return found, first
