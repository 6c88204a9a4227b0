"""A launcher's and a scheduler's verdict lines: their reports on a child that already ended
(torchrun's ``ChildFailedError`` and root-cause table, Open MPI's, MPICH's, DeepSpeed's, srun's
and LSF's exit lines) and the scheduler's cause lines (Slurm's OOM-kill count and cancel, LSF's
``TERM_``), shown only when the failing process printed no error of its own (README rule R8).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from gpulens.diagnosis.keyscan import find_keys

__all__ = ["LAUNCHER_KEYS", "is_launcher_verdict", "verdict_lines"]


#: A launcher's report on a child that already failed: which rank, then the exit lines.
LAUNCHER_KEYS = ("failed (exitcode", "errors.ChildFailedError", "Root Cause (first observed failure)",
                 "detected that one or more processes exited", "Process name:", "mpirun noticed that process rank",
                 "BAD TERMINATION OF ONE", "exits with return code", "Exited with exit code")
#: A pipeline runner's report that a command it ran exited non-zero: Node.js' ``child_process`` (lib/child_process.js
#: ``checkExecSyncError`` and ``exec``'s ``exithandler``: ``new Error("Command failed: " + cmd)``, printed
#: "Error: Command failed: python -m ...") and execa's (lib/error.js ``getErrorPrefix``: "Command failed with exit code
#: 2: python eval.py"): the runner's verdict on its child, as a launcher's (README rule R8).
_RUNNER_KEYS = ("Error: Command failed: ", "Command failed with exit code ")
#: The launcher's and the scheduler's verdict lines, most telling first (a cause the scheduler
#: names, the launcher's summary of which rank failed, then the exit lines, then a runner's report).
_VERDICT_KEYS = ("oom_kill event", "TERM_", "CANCELLED AT", "SignalException", *LAUNCHER_KEYS, *_RUNNER_KEYS)


def verdict_lines(lines: Sequence[str], start: int) -> list[int]:
    """The launcher's and the scheduler's verdict lines after ``start``, most telling first: the
    first of each kind (Slurm's OOM-kill count and cancel, LSF's ``TERM_`` line; torchrun's
    ``ChildFailedError``, its root-cause table and that table's rank row, its first "failed
    (exitcode …)"; Open MPI's "detected that one or more processes exited" and the process it
    names, or its "mpirun noticed that process rank N"; MPICH's "BAD TERMINATION" box; DeepSpeed's
    "exits with return code"; srun's/LSF's "Exited with exit code")."""
    seen: dict[str, int] = {}
    for i in find_keys(lines, _VERDICT_KEYS, start):
        ln = lines[i]
        key = next(k for k in _VERDICT_KEYS if k in ln)
        if ln.lstrip().startswith(("raise", "File")):
            continue  # a traceback's frame or code line ("raise SignalException(...)", "raise ChildFailedError(")
        seen.setdefault(key, i)
    out: list[int] = []
    for key in _VERDICT_KEYS:
        if key == "Root Cause (first observed failure)" and key in seen:
            at = seen[key]  # its rank row says what the header announces
            out += [k for k in range(at + 1, min(len(lines), at + 8)) if _is_rank_row(lines[k])][:1] or [at]
        elif key in seen:
            out.append(seen[key])
    return out


def _is_rank_row(line: str) -> bool:
    """Whether a line is the rank row of torchrun's table ("rank      : 3"), behind a rank's prefix or not."""
    body = line.split("]:", 1)[-1].strip() if "]:" in line and not line.lstrip().startswith("rank") else line.strip()
    return body.startswith("rank") and ":" in body


#: Lines a launcher or scheduler prints about a child that already failed (README rules R6, R8):
#: torchrun's, Open MPI's, MPICH's, DeepSpeed's, srun's and LSF's exit verdicts and torchrun's
#: Root Cause table rows and its error-file dump, srun's step abort.
_LAUNCHER_SAYS = (*LAUNCHER_KEYS, *_RUNNER_KEYS, "srun: Job step aborted", "forcing job termination", "Killing subprocess",
                  "sigkill_handler", "multiprocessing.errors.error_handler", "error_handler.py:")
#: A row of torchrun's failure table (torch/distributed/elastic/multiprocessing/errors/__init__.py,
#: ChildFailedError.format_msg: "rank      : 3", "exitcode  : 1", "error_file: <N/A>").
_TABLE_ROW = re.compile(r"^\s*(?:rank|host|exitcode|local_rank|error_file|time|traceback)\s+:")


def is_launcher_verdict(line: str) -> bool:
    """Whether a line is a launcher's or scheduler's report on a child that already ended (its
    exit code, the Root Cause table), not the child's own error nor the scheduler's cause line."""
    return any(k in line for k in _LAUNCHER_SAYS) or _TABLE_ROW.match(line) is not None

