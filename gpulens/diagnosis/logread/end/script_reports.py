"""The job script's own reports: its shell's (a command or a file it could not find) and those of the
utilities it ran (``rm``, ``find``, the dynamic loader), and whether such a report comes after the
program had ended normally (the script's next commands do not undo the work).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from gpulens.diagnosis import logs
from gpulens.diagnosis.logread.end.after_error import NOT_OUTPUT, ranks_free, says_arning
from gpulens.diagnosis.logread.end.completion_messages import STRONG_END, completion_strength
from gpulens.diagnosis.logread.end.progress_end import counters_end, is_progress_bar, last_refresh

__all__ = ["after_work", "script_line", "script_report"]

#: The shell's report of a job script's command it could not run (bash "slurm_script: line 31: foo:
#: command not found", "bash: nvidia-smi: command not found", "job.sh: line 40: out/x.csv: No such file
#: or directory", dash "job.sh: 7: foo: not found"; bash execute_cmd.c ``command_not_found`` and redir.c
#: ``redirection_error``, dash exec.c), not Python's "can't open file '...': [Errno 2] ...".
_SHELL_MISSING = re.compile(r"^(?:\S+: )?(?:line \d+: |\d+: )?[^\[\]]+: (?:command not found|No such file or directory|not found)$")
#: A job script's file and process utilities reporting an error of their own (GNU coreutils and findutils
#: prefix their messages with the program's name: "rm: cannot remove 'tmp.txt': No such file or directory",
#: "find: '/tmp/x': Permission denied", "cp: cannot stat 'out/*.pt': ..."), and the dynamic loader's
#: report of a preload it skipped, which it prints for every command the script runs (glibc elf/rtld.c:
#: "ERROR: ld.so: object '/usr/lib/libtcmalloc.so' from LD_PRELOAD cannot be preloaded (...): ignored.").
_SCRIPT_TOOL = re.compile(
    r"^(?:rm|cp|mv|mkdir|rmdir|ln|ls|cat|find|chmod|chown|chgrp|touch|tar|du|scp|rsync|tee|head|tail|kill|pkill): "
    r"|^(?:ERROR: )?ld\.so: object '[^']+' from \S+ cannot be preloaded \(.*\): ignored\.$")
#: Lines above a shell's report read for the program's last output (blank lines, other shell reports,
#: trackers' lines and warnings skipped).
_BEFORE_SHELL = 40
#: A missing command or file that is the job's next program, not a utility: a Python interpreter, a
#: launcher (torchrun, deepspeed, accelerate, srun, mpirun), a script: the job's next step did not run.
_NEXT_PROGRAM = re.compile(r": (?:python[\d.]*|torchrun|deepspeed|accelerate|srun|mpirun|mpiexec|horovodrun|\S+\.(?:py|sh)): "
                           r"(?:command not found|No such file or directory|not found)$")


def script_line(line: str) -> bool:
    """A report of the job script's shell or of a utility it ran (``_SHELL_MISSING``, ``_SCRIPT_TOOL``)."""
    return bool(_SHELL_MISSING.match(line) or _SCRIPT_TOOL.match(line))


def after_work(lines: Sequence[str], floor: int, at: int) -> bool:
    """Whether the report at ``at`` of the job script's shell or of a utility it ran (a missing
    command or file, ``rm``'s or ``find``'s error: :func:`script_line`) comes after the program ended
    normally: the program's last output line above it is a trainer's or launcher's completion
    message or a progress line at its end (N/N). The shell ran its next command, so the program
    had exited, and no error of its own came between: the work was done, the job script's
    commands after it do not undo it."""
    s = ranks_free(logs.normalize_line(lines[at]))
    if not script_line(s) or _NEXT_PROGRAM.search(s):
        return False
    for k in range(at - 1, max(floor, at - _BEFORE_SHELL) - 1, -1):
        s = ranks_free(logs.normalize_line(lines[k]))
        if not s or script_line(s) or s.startswith(NOT_OUTPUT) or says_arning(s):
            continue  # a tracker's footer, a warning at exit: not the program's last output
        return completion_strength(s) >= STRONG_END or (is_progress_bar(lines[k]) and counters_end(last_refresh(lines[k])) is True)
    return False


def script_report(text: str) -> bool:
    """A failure line that is the job script's shell or a utility it ran reporting an error of its own
    (not a missing next program: :data:`_NEXT_PROGRAM`)."""
    s = ranks_free(text)
    return script_line(s) and not _NEXT_PROGRAM.search(s)
