"""The indicator lines of a failed attempt as an operator picks them (README "Indicator lines:
rules" R1-R9): :func:`pick_lines` takes the first failing rank's own root error lines (the
exception and those it chains, each message once), the lines the classifier's evidence quotes,
the kills that ended the run and why, and a launcher's or scheduler's verdict only when the
failing process printed no error.

Each job it draws on has its own module: :mod:`tracebacks` (a traceback's head, chain and frames),
:mod:`rooterror` (what can be the root error), :mod:`origins` (which rank printed a line, which
failed first, the others' echo lines), :mod:`verdicts`, :mod:`markers` (roots that state no error),
:mod:`copies` (one message printed more than once), :mod:`aborts`, :mod:`runs` (the job script's
runs), :mod:`chains` (a chain's root lines), :mod:`aftermath` and :mod:`scriptcmds` (errors the run did not end on),
:mod:`messages` (a message's lines), :mod:`records` (logging headers) and :mod:`signals`. Other stages
import what they need from those modules, not from here.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

from gpulens.diagnosis import logs
from gpulens.diagnosis.keyscan import find_keys
from gpulens.diagnosis.logread import ranks
from gpulens.diagnosis.logread.end.caught import handled_blocks
from gpulens.diagnosis.logread.indicators.aborts import (
    abort_reason,
    abort_report,
    aborted_on_timeout,
    fatal_abort,
)
from gpulens.diagnosis.logread.indicators.aftermath import (
    child_after_parent,
    ended_from_outside,
    killed_after_going_on,
    logged_and_went_on,
    logged_warning,
    native_error_went_on,
    printed_again,
    recovered_from,
    said_it_goes_on,
    without_aftermath,
    without_spawned,
    without_teardown,
)
from gpulens.diagnosis.logread.indicators.chains import printed_with, root_lines, wraps
from gpulens.diagnosis.logread.indicators.copies import (
    copy_of,
    message_shape,
    what_said,
)
from gpulens.diagnosis.logread.indicators.markers import (
    breakpoint_prompt,
    diverged_root,
    engine_died,
    nan_reported,
    nan_sampled,
)
from gpulens.diagnosis.logread.indicators.messages import (
    code_line,
    hook_errors,
    later_line,
    logged_above,
    logged_first,
    logged_frame,
    logged_record,
    not_heads,
    summary_part,
)
from gpulens.diagnosis.logread.indicators.origins import (
    AROUND,
    COLLECTIVE_TIMEOUT,
    Tags,
    glued_timeouts,
    same_origin,
    spawn_lost,
)
from gpulens.diagnosis.logread.indicators.rooterror import is_root_error
from gpulens.diagnosis.logread.indicators.runs import (
    earliest_copies,
    first_run_end,
    last_run_again,
    split_runs,
)
from gpulens.diagnosis.logread.indicators.scriptcmds import script_went_on
from gpulens.diagnosis.logread.indicators.verdicts import is_launcher_verdict, verdict_lines
from gpulens.diagnosis.logread.lineprefix import ray_free
from gpulens.diagnosis.logread.lines import (
    KERNEL_OOM,
    OOM_KILLED,
    is_benign,
    is_debugger_quit,
    is_failure,
    is_scheduler_kill,
    is_terminal_kill,
)
from gpulens.diagnosis.logread.signals import (
    FORWARD_KEY,
    agent_death_signal,
    launcher_forward,
)
from gpulens.diagnosis.logread.tracebacks import (
    inside_chain,
    norm_body,
    own_frame_code,
)

__all__ = ["RULE_MAX_LINES", "pick_lines"]


@dataclass(frozen=True)
class _Attempt:
    """What the root lines of a failed attempt are picked from: the log's ``lines``, the attempt's
    ``start``, its failure lines (``region``), each line's normalized text (``norm``) and whether a
    line is the first failing rank's (``mine``)."""

    lines: Sequence[str]
    start: int
    region: list[int]
    norm: Callable[[int], str]
    mine: Callable[[int], bool]


def pick_lines(lines: Sequence[str], start: int, failures: Sequence[int], evidence: Sequence[str],
               first: ranks.Origin, norm: Callable[[int], str], limit: int) -> list[int]:
    """Indexes of the lines an operator needs to see the root failure: the first failing
    rank's distinct real error lines (the exception and those it chains, each message once),
    the lines the classifier's evidence quotes and the kills that ended the run; at most
    ``limit``. A launcher's/scheduler's verdict (torchrun's "failed (exitcode", ChildFailedError
    and its table, srun's and mpirun's exit lines) only when the failing process printed no
    error, and then its first line (README rule R8). ``start``: the last launch's (:func:`relaunched`)."""
    tags = Tags(lines, start)
    at = _Attempt(lines, start, [i for i in failures if i >= start], _everywhere(lines, start, norm),
                  lambda i: same_origin(tags.of(i), first))
    hook = hook_errors(lines, start)
    own, caught = _own_errors(at, hook, _ownline(tags, first))
    middles = {i for i in own if inside_chain(lines, i)}
    own = [i for i in own if i not in middles]
    verdict_at = verdict_lines(lines, start)
    run_end = first_run_end(own, verdict_at)
    runs = split_runs(lines, own, start, anew := first.rank is None and first.proc is None)
    again = last_run_again(lines, runs, at.norm, anew)
    picked, later = _picked_runs(at, own, runs, again, run_end)
    picked = [logged_record(lines, logged_first(lines, i, at.norm)) for i in picked]
    chained = set(picked)  # each says its own message (R4), though their quoted names are blanked alike
    if picked and is_debugger_quit(at.norm(picked[-1])):
        picked = breakpoint_prompt(lines, picked[-1]) + picked
    if not own:  # only symptoms: a collective timeout is the key message (the first one)
        picked = _first_timeout(at)
    window = range(run_end) if again is None else range(runs[-1][0], 1 << 62)  # the run whose lines are picked
    passed = set(own) | middles | handled_blocks(lines, max(0, start - AROUND), len(lines)) | caught | hook
    picked = _with_quoted(at, picked, _quoted(lines, start, failures, evidence, at.norm), own, window, passed, caught)
    picked += _ending_kills(at, picked, own, caught)
    verdict = [i for i in verdict_at if not (own and _cleanup(at.norm(i))) and i not in picked]
    found = _shown_lines(at, picked, chained, own, verdict, min(limit, RULE_MAX_LINES))
    if found:
        found = _with_causes(at, found, evidence, min(limit, RULE_MAX_LINES))
        found = engine_died(lines, _with_bare_source(lines, found, min(limit, RULE_MAX_LINES)))
    return _first_ranks(lines, sorted(set(found)), first, later)


#: A bare ``StopIteration`` ending a traceback: an exhausted iterator, which a library raises for the caller's
#: ``next()`` (torch's DataLoader ``_next_data``: ``raise StopIteration``); the caller's statement is what failed.
_BARE_EXCEPTION = re.compile(r"(?:[\w.]+\.)?StopIteration\s*$")


def _with_bare_source(lines: Sequence[str], found: list[int], cap: int) -> list[int]:
    """``found`` (at most ``cap``) and, for a bare ``StopIteration`` there raised in a library's code, the code
    line of the job's own last frame above it (README rule R3: with no message, the source line of the failing
    statement is the only message there is; the library's ``raise StopIteration`` says nothing the job did, its
    ``next(iter(loader))`` does). Not when that line is within 2 lines of the exception (the line above)."""
    out = list(found)
    for i in found:
        if len(out) >= cap or _BARE_EXCEPTION.fullmatch(norm_body(lines[i])) is None:
            continue
        src = own_frame_code(lines, i)
        if src is not None and src < i - 2 and src not in out:
            out.append(src)
    return out


def _own_errors(at: _Attempt, hook: Collection[int], ownline: Callable[[int], bool]) -> tuple[list[int], set[int]]:
    """(the first failing rank's real error lines, those passed over as caught): not a logged frame, a hook's
    error, a launcher's verdict, a summary's part or a lost spawn; a logged warning or an error the process logged
    and went on from is passed over while others remain; errors the process went on from before a kill
    (``ownline``: its own lines for certain), its errors when a watchdog's abort on a timeout took it down (R6),
    a signal's aftermath, teardown errors and spawned children's errors are caught. The lines printed with the
    first one are its own too."""
    lines, region, norm = at.lines, at.region, at.norm
    own = not_heads(lines, [i for i in region if is_root_error(norm(i)) and at.mine(i) and not logged_frame(lines[i])
                             and i not in hook and not is_launcher_verdict(norm(i)) and not summary_part(lines, i)
                             and not spawn_lost(lines, i)])
    again = printed_again(lines, own, norm)
    children = {i for i in own if child_after_parent(lines, i, own)}  # its spawned children's deaths after it
    own = [i for i in own if not logged_warning(lines[i]) and not logged_and_went_on(lines, i, own, norm)
           and i not in again and not script_went_on(lines, i, own, norm)
           and not native_error_went_on(lines, i, own, norm) and i not in children
           and not recovered_from(norm(i)) and not said_it_goes_on(lines, i)] or own
    errors = [i for i in own if not is_scheduler_kill(norm(i))]
    caught = set(errors) if errors and killed_after_going_on(lines, errors[-1], region, norm, ownline) else set()
    caught |= children - set(own)
    own = [i for i in own if i not in caught]
    if own and aborted_on_timeout(own, region, norm, at.mine):
        caught, own = caught | set(own), []  # the watchdog took the process down: its timeout is the cause (R6)
    kept = without_spawned(lines, without_teardown(lines, without_aftermath(own, region, norm, lines), norm), region, norm)
    caught, own = caught | (set(own) - set(kept)), kept
    if own:
        own = sorted(set(own) | set(printed_with(lines, own[0], at.mine)))
    return own, caught


def _picked_runs(at: _Attempt, own: Sequence[int], runs: Sequence[Sequence[int]], again: bool | None,
                 run_end: int) -> tuple[list[int], list[int]]:
    """(the root lines picked, those of the last run): the first run's (before ``run_end``) when the job ran
    once; when a later run of the job script failed again (R1, ``again`` False) the last run's lines, whichever
    rank printed them first (R5), or (R7, ``again`` True) the first run's root and then the last run's."""
    if again is None:
        return root_lines(at.lines, [i for i in own if i < run_end], at.norm), []
    later = earliest_copies(root_lines(at.lines, runs[-1], at.norm), [i for i in at.region if i > runs[-2][-1]], at.norm)
    if not again:
        return list(later), later
    return root_lines(at.lines, [i for i in own if i < run_end], at.norm)[:1] + later, later


def _first_timeout(at: _Attempt) -> list[int]:
    """The first collective timeout of the attempt (the key message when it shows only symptoms), after a
    timeout glued to a line before it."""
    picked = [i for i in at.region if COLLECTIVE_TIMEOUT.search(at.norm(i)) is not None][:1]
    return [i for i, _ in glued_timeouts(at.lines, max(0, at.start - 1), picked[0])][:1] + picked if picked else picked


def _with_quoted(at: _Attempt, picked: list[int], quoted: Sequence[int], own: Sequence[int], window: range,
                 passed: Collection[int], caught: Collection[int] = ()) -> list[int]:
    """``picked`` and the lines the classifier's evidence quotes (``quoted``) that add what they do not say
    (R4, R8): the failing rank's, in the run whose lines are picked (``window``), none of ``passed`` (its own error
    lines already read, those caught or handled, a hook's) nor just below one of ``caught`` (the rest of its
    report), not next to a picked line or a later line of one, no cleanup's error after a real one, no lost spawn,
    no abort on an error already picked (R6)."""
    picked = list(picked)
    norm = at.norm
    texts = {message_shape(norm(i)) for i in picked}
    for i in quoted:
        if not any(abs(i - k) <= _NEXT_TO for k in picked) and not later_line(at.lines, i, picked, at.region) \
                and message_shape(norm(i)) not in texts and at.mine(i) and not what_said(norm(i), texts) \
                and not (own and _cleanup(norm(i))) and i in window \
                and i not in passed and not any(0 < i - k <= _NEXT_TO for k in caught) \
                and not spawn_lost(at.lines, i) \
                and not (picked and abort_report(norm(i))):
            picked.append(i)
            texts.add(message_shape(norm(i)))
    return picked


def _ending_kills(at: _Attempt, picked: Sequence[int], own: Sequence[int], caught: Collection[int]) -> list[int]:
    """The first two kills of the attempt not yet picked that ended the run: with no own error any, else one after
    the first error that explains why (:func:`_why_killed`); not a caught line, a secondary or benign one, a
    cleanup's after a real error, nor an abort on an error a line above named (R6)."""
    norm = at.norm
    kills = [i for i in at.region if is_terminal_kill(norm(i)) and not at.lines[i][:1].isspace() and i not in caught
             and not logs.is_secondary(norm(i)) and not is_benign(norm(i)) and not (own and _cleanup(norm(i)))]
    return [i for i in kills if i not in picked
            and (not own or (i > own[0] and _why_killed(norm(i), own, norm, at.lines[i + 1:i + 1 + _AFTER_KILL])))
            and not (picked and abort_report(norm(i)))][:2]


def _shown_lines(at: _Attempt, picked: Sequence[int], chained: Collection[int], own: Sequence[int],
                 verdict: Sequence[int], cap: int) -> list[int]:
    """The lines shown, at most ``cap``: the picked ones, each message once; with no own error and no timeout
    among them, the launcher's death signal (R6); else a launcher's verdict's first line when the failing
    process showed no error (R8); else the first symptoms, without wrappers and copies (R4, R5, R9)."""
    norm = at.norm
    found = _at_most(_once(picked, norm, chained), cap)
    if not own and not any(COLLECTIVE_TIMEOUT.search(norm(i)) for i in found):  # the launcher itself got a signal (R6)
        found = _death_signal(at.lines, at.start) or found
    if not found:  # a launcher's verdict only when the failing process showed no error: one line
        found = _first_verdict(sorted(set(picked) | set(verdict)), norm)
    if not found:  # only symptoms: the first ones, without wrappers and copies (R4, R5, R9)
        rest = [i for i in at.region if not code_line(at.lines[i])]  # never a traceback's frame or code line (R2)
        rest = [i for i in rest if not logs.is_secondary(norm(i))] or rest or list(at.region)
        found = _at_most(_once(rest, norm) or rest, cap)
    return found


def _with_causes(at: _Attempt, found: list[int], evidence: Sequence[str], cap: int) -> list[int]:
    """``found`` (at most ``cap``) after where the run diverged, before what failed because of it (R7: a
    divergence, a NaN reported or sampled), or after why it aborted, and with a fatal abort's lines (R6)."""
    lines = at.lines
    roots = diverged_root(lines, at.start, evidence) or nan_reported(lines, at.start, found, at.norm) \
        or nan_sampled(lines, found) or abort_reason(lines, found)
    return _at_most([i for i in roots if i not in found] + found + fatal_abort(lines, found), cap)


def _first_ranks(lines: Sequence[str], found: list[int], first: ranks.Origin, later: Sequence[int]) -> list[int]:
    """``found`` without the lines whose own prefix names another rank/node than the first failing
    one (their copies and symptoms: README rule R5), except ``later``, a later run's error lines at
    their earliest printing (another process group: its first rank to print need not be the
    first run's); all of ``found`` when none is left."""
    return [i for i in found if i in later or same_origin(ranks.origin_of(lines[i]), first)] or found


def _ownline(tags: Tags, first: ranks.Origin) -> Callable[[int], bool]:
    """Whether a line is the failing process's own for certain: its rank's prefix when it has
    one (an untagged line of a multi-rank log may be any rank's), else any line."""
    if first.rank is None:
        return lambda i: same_origin(tags.of(i), first)
    return lambda i: tags.of(i).rank == first.rank


def _once(picked: Sequence[int], norm: Callable[[int], str], chained: Collection[int] = ()) -> list[int]:
    """``picked`` without the launcher's verdicts when a line of the failing process itself shows
    the error (rule R8), and without the copies of a message already picked, whatever rank
    prefix or numbers they carry (R5: the earliest copy); of ``chained`` (the lines
    :func:`chains.root_lines` chose, each its own message), only those that quote the same names."""
    words = [i for i in picked if not is_launcher_verdict(norm(i))]
    if not words:
        return []
    keep = [i for i in words if not wraps(ranks.strip_prefix(norm(i)).strip())] or words
    out: list[int] = []
    seen: list[tuple[int, str]] = []
    for i in sorted(keep):
        text = ranks.strip_prefix(norm(i)).strip().rstrip(":").rstrip()
        if not copy_of(i, text, seen, chained):
            seen.append((i, text))
            out.append(i)
    return out


#: README rule R9: never more than three indicator lines.
RULE_MAX_LINES = 3


def _at_most(found: list[int], n: int) -> list[int]:
    """At most ``n`` lines: the first ones (the root) and the last (the error that ended the
    process), rule R9."""
    return found if len(found) <= n else found[:n - 1] + found[-1:]


def _death_signal(lines: Sequence[str], start: int) -> list[int]:
    """The first line of the attempt's end where torchrun says it got a signal (README rule R6:
    the first line that says a signal ended the run; the SIGTERMs it sends its workers, its
    error-file dump and its ``SignalException`` traceback follow from it), or where Lightning's launcher passes
    the signal it got on to its ranks' processes (:func:`signals.launcher_forward`)."""
    for i in find_keys(lines, ("death signal", FORWARD_KEY), max(0, start - AROUND)):
        if agent_death_signal(lines[i]) or launcher_forward(lines[i]):
            return [i]
    return []


def _first_verdict(verdicts: Sequence[int], norm: Callable[[int], str]) -> list[int]:
    """One line of ``verdicts``: a scheduler's cause line (a cancel, an OOM kill; rule R6) when
    there is one, else the earliest launcher verdict (the first that names the failed process:
    torchrun's "failed (exitcode", before its ChildFailedError and Root Cause table; rule R8)."""
    causes = [i for i in verdicts if not is_launcher_verdict(norm(i))]
    return causes[:1] or sorted(verdicts)[:1]


#: The kernel's or the cgroup's OOM kill: says why a process that printed its error was killed (R6).
_OOM_KILL = re.compile(rf"{OOM_KILLED}|{KERNEL_OOM}")
#: A quoted line this close to a picked one says the same (a C++ ``what():`` under its
#: ``terminate called``; the scorer's slack).
_NEXT_TO = 2


def _why_killed(line: str, own: Sequence[int], norm: Callable[[int], str], after: Sequence[str] = ()) -> bool:
    """Whether a kill line after the failing process's own lines says why it ended (rule R6: both
    the line that says it was killed and the one that says why): the kernel's or the cgroup's OOM
    kill after any error; a scheduler's time limit or run limit only after a signal or kill line
    of the process (LSF's "User defined signal 2" before its ``TERM_RUNLIMIT``), not after an
    exception that ended the process itself, unless the launcher reports in the lines ``after`` it
    that the kill's signal ended a rank (one was still running: the limit ended the job)."""
    if _OOM_KILL.search(line):
        return True
    if not ended_from_outside(line):
        return False
    return all(is_terminal_kill(norm(i)) for i in own) or any(_KILLED_BY_IT.search(x) for x in after)


#: Lines after a scheduler's kill read for a launcher's report of a rank its signal ended.
_AFTER_KILL = 4
#: A launcher's report of a rank a scheduler's SIGTERM or SIGKILL ended: Cray PALS mpiexec's
#: "x3007c0s19b0n0: rank 57 died from signal 15", Open MPI's "mpirun noticed that process rank 0
#: with PID 4242 on node gpu07 exited on signal 15 (Terminated)."
_KILLED_BY_IT = re.compile(r"\brank \d+ died from signal (?:9|15)\b|\bexited on signal (?:9|15)\b")


def _everywhere(lines: Sequence[str], start: int, norm: Callable[[int], str]) -> Callable[[int], str]:
    """``norm`` (the normalized lines from ``start`` on), for the lines above ``start`` too; a line behind Ray's
    process prefix (Ray's workers, vLLM's "(EngineCore pid=N)") normalized without it, so that its logged record and
    its traceback's exception line read as one process's two printings of one chain."""
    ray: dict[int, str] = {}  # the Ray-prefixed lines' texts, each normalized once

    def get(i: int) -> str:
        raw = lines[i]
        if "pid=" not in raw[:ranks.RAY_HEAD]:
            return norm(i) if i >= start else logs.normalize_line(raw).strip()
        if i not in ray:
            ray[i] = logs.normalize_line(ray_free(raw)).strip()
        return ray[i]
    return get


def _cleanup(norm: str) -> bool:
    """A scheduler's cancel with no reason after the job's own error (the allocation ended)."""
    return "CANCELLED AT" in norm and "DUE TO" not in norm


def _quoted(lines: Sequence[str], start: int, failures: Sequence[int], evidence: Sequence[str],
            norm: Callable[[int], str]) -> list[int]:
    """The first failure line after ``start`` that holds each quoted evidence line (not code
    lines, not symptoms)."""
    out = []
    for e in evidence[:4]:
        key = e.strip()[:120]
        if len(key) < 4 or key.startswith("terminated: ") or not is_root_error(key) or not any(c.isalpha() for c in key):
            continue
        hit = next((i for i in failures if i >= start and key in norm(i)), None)  # most often one of them
        if hit is None:
            hit = next((i for i in find_keys(lines, (key[:40],), start) if key in norm(i)), None)
        if hit is not None and is_root_error(norm(hit)) and not logged_frame(lines[hit]) and not summary_part(lines, hit) \
                and (is_failure(norm(hit), lines[hit]) or _SAYS_ERROR.search(norm(hit)) is not None):
            out.append(logged_above(lines, hit))
    return out


#: Words of a line that states a failure (the classifier's evidence is read at most four times); ``ERROR`` as a word,
#: not inside a setting's name (Hydra's "Set the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace.",
#: hydra/_internal/utils.py ``run_and_report``: its advice after the error, README R2).
_SAYS_ERROR = re.compile(r"[Ee]rror|\bERROR\b|[Ee]xception|[Ff]ail|FAIL|[Kk]illed|not found|[Dd]enied|[Ii]nvalid|No such"
                         r"|out of memory|[Tt]imeout|timed out|[Aa]bort|[Ss]egmentation|Interrupt|[Uu]nable|[Cc]annot"
                         r"|can't|[Mm]ismatch|nan\b|NaN")


