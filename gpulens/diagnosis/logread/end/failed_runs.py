"""What says some of a job's work failed although the job went on to its end: a test or batch runner's
closing tally counting failures, a batch runner's summary counting failed runs (and the failed run's
exception line), and a runner's report that its last command exited non-zero before its closing banner.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from gpulens.diagnosis import logs
from gpulens.diagnosis.guarded import Guarded
from gpulens.diagnosis.keyscan import find_keys
from gpulens.diagnosis.logread.end.after_error import ranks_free
from gpulens.diagnosis.logread.end.progress_end import last_refresh
from gpulens.diagnosis.logread.end.uncaught import TRACEBACK_LINES
from gpulens.diagnosis.logread.tracebacks import TRACEBACK

__all__ = ["CLOSING_LINES", "closed_after_failed_stage", "failed_run_line", "failed_tally", "runs_failed", "stage_failed"]

#: A test or batch runner's closing tally that counts failures (not zero): pytest's summary line
#: (_pytest/terminal.py ``build_summary_stats_line``: "==== 1 failed, 4 passed in 2.31s ===="),
#: unittest's (unittest/runner.py ``TextTestRunner.run``: "FAILED (failures=1, errors=2)"), CTest's
#: (cmCTestTestHandler.cxx: "80% tests passed, 1 tests failed out of 5").
#: A runner that ends so went on after the failure it caught, to a summary that says the job failed.
_FAILED_TALLY = re.compile(
    r"^=*\s*(?:\d+ \w+, )*[1-9]\d* (?:failed|errors?)(?:, \d+ \w+)* in [\d.]+s\b|^FAILED \((?:failures|errors)=[1-9]"
    r"|\btests passed, [1-9]\d* tests? failed out of \d+")
#: A batch runner's closing summary that counts the runs it started (the shell loops and Python drivers
#: that run one evaluation or training per configuration, catch each one's non-zero exit and go on): a
#: line of its own "Failed: 1/5", "Failed:          1", "Failed runs: 2" (not zero), beside the count
#: of those that passed ("Passed: 4/5", "Successful: 4", "Succeeded: 3"), as Nextflow's and Snakemake's
#: run summaries and CI runners count jobs. Both counts on lines of their own: a metric ("failed episodes:
#: 3 (success rate 0.97)") is not one.
_RUNS_FAILED = re.compile(r"^(?:[Ff]ailed|FAILED)(?: (?:runs|jobs|tasks|stages|modes|steps|experiments))?\s*:\s*[1-9]\d*(?:\s*/\s*\d+)?$")
_RUNS_PASSED = re.compile(r"^(?:[Pp]assed|PASSED|[Ss]uccessful|[Ss]ucceeded|SUCCEEDED)(?: (?:runs|jobs|tasks|stages|modes|steps|experiments))?"
                          r"\s*:\s*\d+(?:\s*/\s*\d+)?$")


def failed_tally(lines: Sequence[str], tail: Sequence[int]) -> int | None:
    """The last line among ``tail`` that is a test or batch runner's closing tally counting failures
    (``_FAILED_TALLY``), None without one."""
    return next((i for i in reversed(tail) if _FAILED_TALLY.search(logs.normalize_line(last_refresh(lines[i])).strip())), None)


def runs_failed(lines: Sequence[str], tail: Sequence[int]) -> int | None:
    """The line of a batch runner's closing summary among ``tail`` that counts failed runs beside a
    count of passed ones (``_RUNS_FAILED``, ``_RUNS_PASSED``); None without one."""
    shown = {i: logs.normalize_line(last_refresh(lines[i])).strip() for i in tail}
    failed = next((i for i in reversed(tail) if _RUNS_FAILED.match(shown[i])), None)
    return failed if failed is not None and any(_RUNS_PASSED.match(t) for t in shown.values()) else None


#: An exception line as Python's traceback ends (``pkg.mod.ValueError: msg``, ``AssertionError``),
#: read after the prefix its traceback's header line carries (a logger's, a launcher's).
#: Kept apart from ``tracebacks.EXCEPTION``, which takes "Quit" and "Failure" names and a "(" after the
#: name: the failed run's line answered with this one.
_RUN_EXCEPTION = re.compile(r"^(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Exit|Interrupt)\b(?::|$)")


def failed_run_line(lines: Sequence[str], floor: int, tally: int) -> int:
    """The line of a failed run that a closing tally at ``tally`` counts: the exception line of the
    last traceback in ``lines[floor:tally]`` (what its runner caught before it went on: the final
    line of the traceback, written after the header's prefix), else the tally itself."""
    heads = find_keys(lines, (TRACEBACK,), floor, tally)
    if not heads:
        return tally
    head = heads[-1]
    cut = lines[head].find(TRACEBACK)
    for k in range(head + 1, min(tally, head + TRACEBACK_LINES)):
        if _RUN_EXCEPTION.match(lines[k][cut:]) or _RUN_EXCEPTION.match(ranks_free(logs.normalize_line(lines[k]))):
            return k
    return tally


#: A job script's or a pipeline runner's report that a command it ran exited non-zero: Python's
#: ``subprocess.CalledProcessError`` ("Command '['python', 'eval.py']' returned non-zero exit status 2.",
#: Lib/subprocess.py ``CalledProcessError.__str__``), execa's ("Command failed with exit code 2: python
#: eval.py", lib/error.js ``getErrorPrefix``) and the runners written after them ("Command failed with code 1",
#: "Stage 'eval' failed with exit code 1", "Step 3 failed with return code 2").
_STAGE_FAILED = Guarded(
    r"\breturned non-zero exit status -?[1-9]"
    r"|\b(?:[Cc]ommand|[Pp]rocess|[Ss]ubprocess|[Ss]tage|[Ss]tep|[Tt]ask|[Jj]ob)\b[^\n]{0,80}?\bfailed with "
    r"(?:exit |return )?(?:code|status)\s*[:=]?\s*-?[1-9]",
    ("non-zero exit status", "failed with"),
)
#: Non-blank lines a runner prints after its last command's report and before its closing banner's
#: completion line (a ruler, "EXPERIMENT COMPLETE", the time it took), the failed command's own
#: error output it echoes aside.
CLOSING_LINES = 6


def stage_failed(norm: str) -> bool:
    """Whether a (normalized) line is a runner's report that a command it ran exited non-zero (``_STAGE_FAILED``)."""
    return _STAGE_FAILED.search(norm) is not None


def closed_after_failed_stage(lines: Sequence[str], failures: Sequence[int], done: int) -> int | None:
    """The runner's report that its last command exited non-zero (:func:`stage_failed`), when the
    completion line at ``done`` is only its closing banner after it: between the two, the failed
    command's error output it echoes (failure lines, records at ERROR level) and at most
    ``CLOSING_LINES`` other non-blank lines. The runner prints its banner whatever its commands'
    exit statuses; the last of them failed, and nothing ran after it. None when there is none."""
    echoed = set(failures)
    other = 0
    for k in range(done - 1, -1, -1):
        if stage_failed(logs.normalize_line(lines[k])):
            return k
        if lines[k].strip() and k not in echoed and "ERROR" not in lines[k]:
            other += 1
            if other > CLOSING_LINES:
                return None
    return None
