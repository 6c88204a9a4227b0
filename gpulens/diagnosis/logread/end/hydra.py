"""Hydra's report of the exception that ended a job (hydra/_internal/utils.py ``run_and_report``):
its last line, the exception its compact report names, and the config error it reports without a
traceback.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from gpulens.diagnosis import logs
from gpulens.diagnosis.keyscan import find_keys
from gpulens.diagnosis.logread.tracebacks import TRACEBACK

__all__ = ["HYDRA_END", "hydra_compact", "hydra_exception", "hydra_report"]

#: The last line Hydra writes under its report of the exception that ended the job.
HYDRA_END = "HYDRA_FULL_ERROR=1"
#: Lines above Hydra's last line searched for the exception line of its compact report, and
#: for the traceback of its long one.
_HYDRA_REPORT = 40
_HYDRA_TRACEBACK = 400


def hydra_report(lines: Sequence[str], floor: int, at: int) -> list[int]:
    """What Hydra's last line at ``at`` adds to the job's failure lines: the exception its
    compact report names (``hydra_exception``), else the line itself when no traceback comes
    before it (a config error Hydra reports in a few lines of its own); nothing when a
    traceback does (its exception line already says the job failed)."""
    got = hydra_exception(lines, max(floor, at - _HYDRA_REPORT), at)
    if got:
        return got
    if find_keys(lines, (TRACEBACK,), max(floor, at - _HYDRA_TRACEBACK), at):
        return []
    return [*hydra_compact(lines, max(floor, at - _HYDRA_REPORT), at), at]


#: The first line of the message of a ``CompactHydraException`` (a config composition error),
#: which ``run_and_report`` writes alone, with no traceback and no exception class, above its
#: last line: hydra _internal/config_loader_impl.py ("Could not override 'k'.", "Could not
#: append to config. ...", "Could not delete from config. ...", "Error merging override k=v",
#: "Override k=v looks like a config group override, but config group 'k' does not exist.",
#: "Ambiguous value for argument 'k=a,b'", "Sweep parameters 'k=a,b' requires --multirun",
#: "Primary config directory not found."), _internal/defaults_list.py and config_repository.py
#: ("In 'config': Could not find 'model/x'", "Could not load 'x'", "Cannot find primary config
#: 'c'", "Multiple values for x. ..."), core/override_parser ("Error parsing override 'k'").
_HYDRA_COMPACT = re.compile(
    r"^(?:In '[^'\n]+': )?(?:Could not (?:override|find|load) '|Could not (?:append to|delete from) config\."
    r"|Cannot find primary config '|Primary config (?:directory|module)\b|Error (?:merging|parsing) override "
    r"|Override \S+ looks like a config group override|Ambiguous value for argument '|Sweep parameters '"
    r"|Multiple values for |Additional config directory ')")


def hydra_compact(lines: Sequence[str], lo: int, hi: int) -> list[int]:
    """The index (one or none) of the first line of the compact message Hydra wrote last in
    ``lines[lo:hi]`` (``_HYDRA_COMPACT``): the config error it reports without a traceback."""
    for i in range(hi - 1, lo - 1, -1):
        s = logs.normalize_line(lines[i]).strip()
        if HYDRA_END in s:
            return []  # an earlier report's end: this one has no message of its own above
        if _HYDRA_COMPACT.match(s):
            return [i]
    return []


#: The exception an instantiate error wraps, as ``repr`` prints it on the line after Hydra's
#: "Error in call to target 'pkg.fn':" (``TypeError("fn() got an unexpected keyword ...")``).
_EXC_REPR = re.compile(r"^(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Interrupt|Exit)\(.*\)$")


def hydra_exception(lines: Sequence[str], lo: int, hi: int) -> list[int]:
    """The index (one or none) of the exception line of Hydra's compact report in
    ``lines[lo:hi]``: the wrapped exception's ``repr`` right after "Error in call to target"
    (an instantiate error: Hydra prints no traceback and no "XError:" line for it)."""
    for i in range(hi - 1, lo, -1):
        if logs.normalize_line(lines[i - 1]).strip().startswith("Error in call to target "):
            s = logs.normalize_line(lines[i]).strip()
            return [i] if _EXC_REPR.match(s) else []
    return []
