"""Which run of the job script printed an error (README rule R1: only the last attempt is
labelled): torchrun's last launch, a launcher's verdict ending one run, a program started anew
after an exception ended its process (its start-up printed again), and how the last run's error
relates to the first run's (the same again, or what the first left missing: rule R7).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from gpulens.diagnosis import logs
from gpulens.diagnosis.keyscan import find_keys
from gpulens.diagnosis.logread.indicators.aborts import report_frame
from gpulens.diagnosis.logread.indicators.copies import bare_shape, message_shape, restates
from gpulens.diagnosis.logread.indicators.origins import AROUND
from gpulens.diagnosis.logread.indicators.rooterror import is_root_error
from gpulens.diagnosis.logread.indicators.verdicts import LAUNCHER_KEYS
from gpulens.diagnosis.logread.launches import TORCHRUN_BANNER, launch_banner
from gpulens.diagnosis.logread.lines import (
    ends_own_process,
    has_error_level,
    is_failure,
    is_progress,
    shell_job_died,
)
from gpulens.diagnosis.logread.tracebacks import (
    EXCEPTION,
    TRACEBACK,
    chain_start,
    chained,
    has_head,
    module_frame,
    outer_frame,
    python_head,
    top_frame,
    unprefixed,
)

__all__ = ["earliest_copies", "ended_uncaught", "first_run_end", "last_run_again", "printing", "relaunched", "split_runs"]


def relaunched(lines: Sequence[str], start: int, failures: Sequence[int]) -> int:
    """Where torchrun's last launch starts (its logged OMP_NUM_THREADS banner, :func:`launch_banner`), when failure
    lines precede it and follow it: the errors before it are an earlier launch's, which ended before this one printed
    its start-up (README rule R1; torchrun logs the banner once, in ``torch/distributed/run.py``, before its agent's
    rendezvous, which every node's agent joins before any worker runs: no worker of this launch can have failed
    before it); else ``start``. The old ``torch.distributed.launch`` printed it at its exit: no start there."""
    launches = [i for i in find_keys(lines, (TORCHRUN_BANNER,), start) if launch_banner(lines, i)]
    if not launches:
        return start
    last = launches[-1]
    before = any(start <= i < last for i in failures)
    return last if before and any(i > last for i in failures) else start


#: A later run's error that names what an earlier run failed to leave behind (README rule R7's
#: link: the output file, the checkpoint, the process group).
_LEFT_MISSING = re.compile(r"No such file or directory|does not exist|not found|has not been initialized|Is a directory")


def split_runs(lines: Sequence[str], own: Sequence[int], start: int, anew: bool = False) -> list[list[int]]:
    """``own`` (the failing process's root error lines) split into the runs of the job script that
    printed them: a new run starts after a launcher's verdict on the previous one (torchrun's
    "failed (exitcode", srun's exit line: that process ended), after an error that ends its own
    process (argparse's usage error: :func:`lines.ends_own_process`), or, with ``anew`` (no
    failing rank or process known), when the program started again after an exception that ended
    its process (:func:`_started_again`; where ranks print, the untagged lines between may be any
    rank's). Other ordinary output after a traceback does not tell a new
    process from the same one going on, or from another untagged process."""
    if len(own) < 2:
        return [list(own)]
    ends = [i for i in find_keys(lines, LAUNCHER_KEYS, start) if not lines[i].lstrip().startswith(("raise", "File"))]
    runs = [[own[0]]]
    memo: dict[int, str] = {}
    for prev, nxt in zip(own, own[1:], strict=False):
        if not _parallel_copy(lines, prev, nxt) and (any(prev < v < nxt for v in ends) or ends_own_process(lines, prev)
                                                     or _next_command(lines, prev, nxt)
                                                     or (anew and _started_again(lines, runs[-1], nxt, memo))):
            runs.append([])
        runs[-1].append(nxt)
    return runs


def _next_command(lines: Sequence[str], prev: int, nxt: int) -> bool:
    """Whether ``prev`` and ``nxt`` are the shell's reports of two commands of the job script dying of a signal
    (bash's "run.sh: line 4:  3865 Killed   python3 fit.py ...", then "line 5:  8004 Killed ..."; another pid:
    :func:`lines.shell_job_died`): the first command had ended when the script ran the next (README rule R1)."""
    died = shell_job_died(lines[prev])
    return died is not None and shell_job_died(lines[nxt]) not in (None, died)


def _parallel_copy(lines: Sequence[str], prev: int, nxt: int) -> bool:
    """Whether the error line ``nxt`` repeats ``prev``'s message with nothing but blank lines between: the
    processes a launcher started at once printing one error each (every rank's "can't open file"), one run
    (README rule R5), not a job script running the program again (which prints its start-up before failing)."""
    if any(ln.strip() for ln in lines[prev + 1:nxt]):
        return False
    return bare_shape(logs.normalize_line(lines[prev]).strip()) == bare_shape(logs.normalize_line(lines[nxt]).strip())


#: What Hydra writes below the job's exception before its ``sys.exit(1)``
#: (hydra/_internal/utils.py run_and_report, facebookresearch/hydra 00480e9).
_HYDRA_EXIT = "Set the environment variable HYDRA_FULL_ERROR=1"
#: Lines below an exception line searched for a chain marker or Hydra's exit line.
_BELOW = 8


def ended_uncaught(lines: Sequence[str], i: int) -> bool:
    """Whether the exception line ``i`` ended its process: the last exception of its chain with a
    traceback whose outermost frame is the main module's (``in <module>``, or runpy's
    ``_run_module_as_main``: no code caught it, Python printed it and exits), or the job's
    exception as Hydra reports it before exiting."""
    below = lines[i + 1:i + 1 + _BELOW]
    if any(_HYDRA_EXIT in ln for ln in below):
        return True
    if any(chained(ln) for ln in below):
        return False
    return top_frame(_outer_frame(lines, i))


def _outer_frame(lines: Sequence[str], i: int) -> str:
    """The outermost frame line of the exception line ``i``'s Python traceback (:func:`tracebacks.outer_frame` below its
    ``Traceback (most recent call last):``), or "" when no traceback is above it."""
    head = python_head(lines, i)
    if head is None:
        return ""
    k = outer_frame(lines, head, i)
    return "" if k is None else lines[k]


def _module_frame(lines: Sequence[str], i: int) -> tuple[str, str] | None:
    """The (script, line) of the exception line ``i``'s traceback's outermost frame when it is the main
    script's module code (CPython's traceback: 'File "train.py", line 63, in <module>'), else None."""
    return module_frame(_outer_frame(lines, i))


def _module_moved(lines: Sequence[str], prev: int, nxt: int) -> bool:
    """Whether the exception ``nxt`` reached the same script's module code as ``prev`` (which ended its process)
    at another statement: a process running that code failed elsewhere than the one that had ended, so it is
    another run of the script (the job script or the user ran it again, README rule R1), not a copy printed by
    a process running beside it, which fails at the same statement (rule R5)."""
    ended, got = _module_frame(lines, prev), _module_frame(lines, nxt)
    return ended is not None and got is not None and ended[0] == got[0] and ended[1] != got[1]


def _logged_exit(lines: Sequence[str], i: int) -> bool:
    """Whether line ``i`` is a program's own error record with no traceback (a logger's ERROR line,
    logging's "%(asctime)s - %(levelname)s - %(message)s": "2025-07-18 18:10:53,684 - ERROR - An
    error occurred during execution: [Errno 2] ..."), which a script's top-level handler logs before
    it exits; whether it did is told by the start-up printed again below it (:func:`_started_again`)."""
    raw = lines[i]
    if raw[:1].isspace() or not has_error_level(raw):
        return False
    return python_head(lines, i) is None


#: Lines of the program's start-up looked for above a run's first error (a short run's: a long
#: one's start-up is far above its error, and its new start is told by its attempt's marks).
_STARTUP_REACH = 300
#: Lines between two runs' errors read for the start-up printed again (a start prints it first).
_BETWEEN_REACH = 300
#: Start-up lines printed again that show the program started anew.
_AGAIN = 2


#: The head torch prints for the traceback of a DataLoader worker's (or a replica's) exception inside the message of
#: the exception it re-raises (torch/_utils.py ``ExceptionWrapper``: "Caught X in DataLoader worker process N.\n"
#: "Original Traceback (most recent call last):\n...").
_ORIGINAL_HEAD = "Original " + TRACEBACK


def _embedding(lines: Sequence[str], i: int) -> int | None:
    """The exception line that embeds the traceback ending at the exception line ``i`` in its message (its
    "Original Traceback" head just below that line: :data:`_ORIGINAL_HEAD`), whose own traceback tells whether the
    process ended there; else None."""
    head = python_head(lines, i)
    if head is None or _ORIGINAL_HEAD not in lines[head]:
        return None
    above = next((k for k in range(head - 1, max(-1, head - 3), -1) if lines[k].strip()), None)
    return above if above is not None and EXCEPTION.match(logs.normalize_line(unprefixed(lines[above])).strip()) else None


def _process_ended(lines: Sequence[str], i: int) -> bool:
    """Whether the error line ``i`` ended its process: its exception was not caught (:func:`ended_uncaught`; for an
    error embedded in a wrapper's message, :func:`_embedding`, the wrapper's), or a script's top-level handler
    logged it (:func:`_logged_exit`)."""
    wrapper = _embedding(lines, i)
    return ended_uncaught(lines, i) or _logged_exit(lines, i) or (wrapper is not None and ended_uncaught(lines, wrapper))


def _started_again(lines: Sequence[str], run: Sequence[int], nxt: int, memo: dict[int, str] | None = None) -> bool:
    """Whether the error line ``nxt`` comes from a new start of the program whose run ``run``
    (its error lines so far) ended at its last exception: that exception ended its process
    (:func:`ended_uncaught`) and, between it and ``nxt``'s traceback, _AGAIN or more lines of
    ordinary output say what the program printed before ``run``'s first error, or before the
    run's first traceback of ``nxt``'s exception (its start-up, or what led to that error, printed
    again: a job script's loop or a sweep ran it anew; README rule R1). Another process printing
    its copy of the same error at the same time (rule R5) prints no such lines between. ``memo``:
    the lines' :func:`_ordinary_shape`, kept across the calls of one reading."""
    prev = run[-1]
    after = next((ln for ln in lines[prev + 1:nxt] if ln.strip()), TRACEBACK)
    if not _process_ended(lines, prev):
        return False  # its process went on
    top = printing(lines, run[0], run[0])
    if _several_running(lines, top, prev, nxt):
        return False  # the other processes' start-up, printed while the first one failed (rule R5)
    if _module_moved(lines, prev, nxt):
        return True
    if has_head(after):
        return False  # another traceback right after it (nothing printed between)
    memo = {} if memo is None else memo
    printed = printing(lines, nxt, prev)
    if printed < nxt:  # an exception's traceback: where the run first printed it
        text = bare_shape(logs.normalize_line(lines[nxt]).strip())
        same = next((i for i in run if bare_shape(logs.normalize_line(lines[i]).strip()) == text), run[0])
        top = max(top, printing(lines, same, same))
    between = {_ordinary_shape(lines, k, memo) for k in range(prev + 1, min(printed, prev + 1 + _BETWEEN_REACH))}
    between.discard("")
    if len(between) < _AGAIN:
        return False
    seen = 0
    for k in range(max(0, top - _STARTUP_REACH), top):
        shape = _ordinary_shape(lines, k, memo)
        if shape in between:
            between.discard(shape)
            seen += 1
            if seen >= _AGAIN:
                return True
    return False


#: What each process of a Lightning DDP run logs as it joins the process group (lightning/fabric/utilities/
#: distributed.py ``_init_dist_connection``: ``log.info(f"Initializing distributed: GLOBAL_RANK: {global_rank}, MEMBER:
#: {global_rank + 1}/{world_size}")``; pytorch_lightning's ``init_dist_connection`` the same): the ranks start together.
_LIGHTNING_MEMBER = "MEMBER: "
#: What a launcher prints once when it starts its local processes: DeepSpeed's launcher
#: (deepspeed/launcher/launch.py main: logger.info(f"nnodes={...}, num_local_procs={...}, node_rank=
#: {...}")) and torchrun's warning when it starts more than one (torch/distributed/run.py,
#: "Setting OMP_NUM_THREADS environment variable for each process to be 1 in default, ...").
_LAUNCH_KEYS = ("num_local_procs=", TORCHRUN_BANNER, _LIGHTNING_MEMBER)
_LAUNCHED_MANY = re.compile(rf"num_local_procs=(?!1\b)\d+|{re.escape(TORCHRUN_BANNER)}|{_LIGHTNING_MEMBER}\d+/(?!1\b)\d+")


def _several_running(lines: Sequence[str], top: int, prev: int, nxt: int) -> bool:
    """Whether a launcher started several local processes before ``top`` (the first run's error)
    and did not start again between the error lines ``prev`` and ``nxt``: the untagged start-up
    lines between them are the other processes' (they start together), not a new launch (R1)."""
    above = find_keys(lines, _LAUNCH_KEYS, 0, top)
    if not above or _LAUNCHED_MANY.search(lines[above[-1]]) is None:
        return False
    return not find_keys(lines, _LAUNCH_KEYS, prev + 1, nxt)


def _ordinary_shape(lines: Sequence[str], k: int, memo: dict[int, str]) -> str:
    """The :func:`copies.message_shape` of line ``k`` when it is a line of a program's ordinary output (not
    blank, not a traceback's or a message's indented line, not an error, not a progress line: a
    loop's, not the start-up's; not tagged with a rank, host or process: another one's), else ""."""
    got = memo.get(k)
    if got is None:
        raw = lines[k]
        body = unprefixed(raw)
        plain = not (len(body) != len(raw) or not body.strip() or body[:1].isspace() or has_head(body)
                     or chained(body) or is_progress(raw) or report_frame(body.strip()))
        norm = logs.normalize_line(body) if plain else ""
        got = memo[k] = message_shape(norm.strip()) if plain and not is_failure(norm, raw) else ""
    return got


def earliest_copies(picked: Sequence[int], run: Sequence[int], norm: Callable[[int], str]) -> list[int]:
    """Each of ``picked`` as the earliest line of ``run`` (the last run's failure lines, any rank's)
    that says the same (README rule R5: the root error once, in the first rank to print it; the
    first failing rank of the whole log need not be the first of a later run)."""
    out = []
    for i in picked:
        text = bare_shape(norm(i))
        out.append(next((k for k in run if k <= i and is_root_error(norm(k)) and bare_shape(norm(k)) == text), i))
    return out


def last_run_again(lines: Sequence[str], runs: Sequence[Sequence[int]], norm: Callable[[int], str],
           anew: bool = False) -> bool | None:
    """How the last of several runs relates to the first: ``False`` when it failed with the first
    run's root error again (a loop or a retry: README rule R1, only the last attempt is labelled),
    ``True`` when its error names what the first run left missing (rule R7: the root and the
    terminal error); when neither, ``False`` too if the first run's process ended by its own
    error (argparse's: what fails later is another process, and the log shows no link: rule R7's
    terminal error only), else ``None`` (or one run): the first run's root error (a launcher's own
    wrapper exceptions may follow its verdict)."""
    if len(runs) < 2:
        return None
    root, last = bare_shape(norm(runs[0][0])), [bare_shape(norm(i)) for i in runs[-1]]
    if any(restates(root, x) for x in last):
        return False
    final = next((i for i in reversed(runs[-1]) if EXCEPTION.match(norm(i))), runs[-1][-1])
    if _LEFT_MISSING.search(norm(final)):
        return True
    if ends_own_process(lines, runs[0][-1]) or _next_command(lines, runs[-2][-1], runs[-1][0]) \
            or (anew and _started_again(lines, runs[-2], runs[-1][0])):
        return False
    return None


def first_run_end(own: Sequence[int], verdicts: Sequence[int]) -> int:
    """The first launcher's or scheduler's verdict line after the first root error line in
    ``own`` (a large number when there is none): once the launcher said the run failed
    (torchrun's "failed (exitcode", a cancel, srun's exit line), what fails after it is another
    command of the job script."""
    return min((v for v in verdicts if own and v > own[0]), default=1 << 62)


def printing(lines: Sequence[str], i: int, floor: int) -> int:
    """Where the printing of the exception line ``i`` starts: the first traceback of the chain
    it ends (``i`` itself without a ``Traceback`` line above it)."""
    head = python_head(lines, i)
    if head is None:
        return i
    return chain_start(lines, head, max(0, floor - AROUND))
