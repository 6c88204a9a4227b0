"""A job script's own shell commands that failed before its program ran: a symlink, a copy, a folder, a
``cd`` or a ``source`` the script tried first. The shell reports each in a fixed shape and goes on to the
next command (a batch script without ``set -e``):

- GNU coreutils' ``error()`` (gnulib lib/error.c: ``"%s: " program_name`` then the message):
  ``ln: failed to create symbolic link '/lib/libcuda.so': Permission denied``,
  ``mkdir: cannot create directory '/scratch/u': Permission denied``, ``cp: cannot stat 'x': No such file or directory``;
- conda's when ``conda activate`` fails (``CondaError: Run 'conda init' before 'conda activate'``);
- bash's own errors (bash error.c ``report_error``/``builtin_error``: the shell's or script's name, ``line N:``
  in a script, then the command): ``/var/spool/slurmd/job7/slurm_script: line 9: cd: /d/x: No such file or
  directory``, ``bash: line 2: /env.sh: No such file or directory``.

When the program then ran and ended with an uncaught exception of its own that does not name what the command
was about, the command's error is one the job went on from (README rule R1), not the root; when it does name
it (the folder ``mkdir`` could not make, the file ``cp`` could not copy) the command's error is the root that
the later error shows the link to (R7), and it stays.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from gpulens.diagnosis.logread.tracebacks import EXCEPTION, norm_body, python_head, unprefixed

__all__ = ["script_went_on"]

#: The commands a job script runs to set up before its program (coreutils and the shell's builtins).
_COMMANDS = r"(?:ln|cp|mv|mkdir|rm|rmdir|touch|chmod|chown|cat|ls|tar|cd|source|export|module)"
#: conda's errors when a job script's ``conda activate`` fails and the script goes on in the environment it had:
#: a shell where ``conda init`` never ran (conda/cli/main_mock_activate.py: ``raise CondaError("Run 'conda init'
#: before 'conda activate'")``) and an environment name that does not exist (conda/exceptions.py
#: ``EnvironmentNameNotFound``: "Could not find conda environment: NAME").
_CONDA_ACTIVATE = (r"CondaError: Run 'conda init' before 'conda (?:de)?activate'"
                   r"|(?:EnvironmentNameNotFound: )?Could not find conda environment: ")
#: A coreutils report (``ln: ...``) or bash's on a command (``SHELL-OR-SCRIPT: [line N: ]CMD: ...``, the shell
#: named by path or as bash/sh, a Slurm batch script as ``slurm_script``, a script as ``NAME.sh``); not bash's
#: report of a job it waited for (``line 34: 2065236 Killed  deepspeed ...``: a kill, README rule R6).
_SHELL_ERROR = re.compile(
    rf"^(?:(?:\S*/)?{_COMMANDS}: |(?:\S*/)?(?:bash|sh|slurm_script|[\w.-]+\.sh): (?:line \d+: )?[^\s:]+: "
    rf"|{_CONDA_ACTIVATE})")
#: The operands a command's error names: quoted (`x', 'x', "x") or an absolute path before a colon.
_OPERAND = re.compile(r"[`'\"‘]([^`'\"’]+)['\"’]|(/[^\s:]+):")


def script_went_on(lines: Sequence[str], i: int, own: Sequence[int], norm: Callable[[int], str]) -> bool:
    """Whether the line ``i`` is a job-script command's error (:data:`_SHELL_ERROR`) after which the program
    ran and raised an uncaught exception of its own (a later line of ``own`` that ends a traceback starting
    after ``i``) that names none of the command's operands (no R7 link)."""
    if _SHELL_ERROR.match(unprefixed(lines[i]).lstrip()) is None:
        return False
    names = _names(norm(i))
    later = [j for j in own if j > i and EXCEPTION.match(norm_body(lines[j]))]
    return any((python_head(lines, j) or -1) > i and not any(n in norm(j) for n in names) for j in later)


def _names(text: str) -> list[str]:
    """The last path part of each operand the command's error names (``libcuda.so`` of ``/lib/libcuda.so``)."""
    out = []
    for m in _OPERAND.finditer(text):
        part = (m.group(1) or m.group(2) or "").rstrip("/").rsplit("/", 1)[-1]
        if len(part) > 1:
            out.append(part)
    return out
