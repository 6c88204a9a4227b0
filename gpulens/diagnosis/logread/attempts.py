"""Several attempts appended to one file (Slurm, LSF and nohup append): where the last one
starts, and what it shows that the last good one did not."""

from __future__ import annotations

import re
from collections.abc import Sequence

from gpulens.diagnosis import logs
from gpulens.diagnosis.guarded import Guarded
from gpulens.diagnosis.keyscan import find_keys
from gpulens.diagnosis.logread.end.uncaught import process_exit
from gpulens.diagnosis.logread.lineprefix import prefix_free
from gpulens.diagnosis.logread.lines import is_failure, is_progress, line_shape, shapes_above
from gpulens.diagnosis.logread.tracebacks import TRACEBACK, module_frame

__all__ = ["attempt_starts", "new_in_last"]

_LSF = "Sender: LSF System"
_ENV = Guarded(r"CUDA(?: Version| version|_VERSION)|[Dd]river [Vv]ersion|\btorch(?:==| version|\.__version__)"
               r"|[Vv]ersion\s*[:=]?\s*\d+\.\d+|\bhost(?:name)?\s*[:=]|SLURM_(?:JOB_)?NODELIST|\bnodelist\b|Running on (?:host|node)",
               ("CUDA", "ersion", "torch", "host", "SLURM_", "nodelist", "Running on "))
_ENV_LINES = 300


def attempt_starts(lines: Sequence[str]) -> list[int]:
    """Indexes where attempts start (always ``[0, ...]``): an LSF report header, a PBS/Torque
    prologue banner, nohup's "ignoring input" line, or a repeat of the file's first line (a job
    script's banner printed again; a logger's timestamped first line logged again at another time
    with the same line after it, :func:`_unstamped`), or a script's top level failing again after
    its uncaught exit (:func:`_exits_again`)."""
    starts = [0]
    first = _first_banner(lines)
    found = find_keys(lines, _STARTS, 1)
    espnet = _espnet_first(lines) if any(_ESPNET in lines[i] for i in found) else None
    stamped = _unstamped(first) if first is not None else None
    if first is not None:  # searched alone: a family keyed by one file's line is scanned in one log only
        repeats = find_keys(lines, [stamped or first], 1)
        if stamped is not None and _side_by_side(lines, repeats, stamped):
            stamped, repeats = None, find_keys(lines, [first], 1)
        found = sorted({*found, *repeats})
    for i in found:
        ln = lines[i]
        if ln.startswith(_NOHUP):
            pass  # nohup's own first words: a new launch appended to the same file
        elif _LSF in ln:
            i = _after_lsf_report(lines, i)
        elif _PBS in ln:
            i = _before_ruler(lines, i)
        elif _ESPNET in ln:
            if espnet is None or _espnet_call(ln) != espnet:
                continue  # another log line, or a nested script's own call (local/data.sh inside asr.sh)
        elif _YOLOX in ln:
            if _YOLOX_ARGS.match(ln) is None:
                continue  # another line of the trainer's, or a rank's copy behind a prefix
        elif _RESTART in ln:
            if _RESTART_BANNER.match(ln) is None:
                continue  # the words in another line
        elif _SLURM_KILL in ln and _KILLED_JOB.search(ln):
            nxt = _after_kill(lines, i)
            if nxt is None:
                continue
            i = nxt
        elif first is None or not (ln == first or stamped is not None and _unstamped(ln) == stamped
                                   and _same_next(lines, i, lines.index(first))) or len(lines) - i <= _MIN_ATTEMPT:
            continue  # not the first line again, or it is with (nearly) nothing after it: buffered
            # output of the same launch flushed at its end (srun's UCX DEBUG lines), no new run
        elif _ruler(lines[0]):  # a banner between rulers: its repeat is framed alike, the ruler above starts it
            if lines[i - 1] != lines[0]:
                continue
            i -= 1
        if i - starts[-1] > _MIN_ATTEMPT and i < len(lines):
            starts.append(i)
    heads = find_keys(lines, (_TB,), 0)
    exits = [(h, e) for h in heads if (e := process_exit(lines, h)) is not None]
    again = [*_relaunches(lines, heads, exits), *_after_interrupts(lines, exits), *_exits_again(lines, heads, exits, starts)]
    return _merged(starts, sorted([*again, *_prompted(lines)]), len(lines))


#: A shell's prompt with the command typed at it, as a terminal capture (scrollback, ``script``, tmux) holds it:
#: ``user@host:path$ cmd`` or ``# cmd`` for root, after a conda or venv name in parentheses.
_PROMPT = re.compile(r"^(?:\([\w.-]+\) )?[\w.-]+@[\w.-]+:[^\s$#]*[$#] (?!\^C)\S")
#: Literals every prompt line holds (the lines :data:`_PROMPT` is tried on).
_PROMPT_KEYS = ("$ ", "# ")
#: Lines of output a command typed at a prompt prints (up to the next prompt), and lines the capture
#: holds before it, for the command to start an attempt: a run of the job, not an ``ls`` or a ``chmod``.
_PROMPT_OUTPUT = 20


def _prompted(lines: Sequence[str]) -> list[tuple[int, int]]:
    """(the line before, the prompt) for each command typed at a shell prompt in a terminal capture
    (:data:`_PROMPT`) that printed more than ``_PROMPT_OUTPUT`` lines with as many before it: the user
    ran the job (or another program) again, and what the earlier commands printed is another attempt's."""
    at = [i for i in find_keys(lines, _PROMPT_KEYS, 0) if _PROMPT.match(lines[i])]
    ends = [*at[1:], len(lines)] if at else []
    return [(i - 1, i) for i, nxt in zip(at, ends, strict=True) if nxt - i > _PROMPT_OUTPUT and i > _PROMPT_OUTPUT]



def _merged(starts: list[int], relaunches: Sequence[tuple[int, int]], n: int) -> list[int]:
    """``starts`` with the start of each relaunch ``(exit, start)`` that no start in
    ``(exit, start]`` already marks and that is more than ``_MIN_ATTEMPT`` lines from the starts
    around it, in order."""
    for end, i in relaunches:
        if any(end < s <= i for s in starts):
            continue  # a launcher's banner between the exit and the opening prints starts it already
        before = max(s for s in starts if s <= i)
        after = min((s for s in starts if s > i), default=n)
        if i - before > _MIN_ATTEMPT and after - i > _MIN_ATTEMPT:
            starts = sorted([*starts, i])
    return starts


_TB = TRACEBACK + ":"
#: The file's first lines read for the program's opening prints (before any traceback).
_OPENING = 20
#: Lines after an exit's exception line searched for the program's opening prints again (the
#: exception message's other lines, the next launch's import warnings come between).
_AFTER_EXIT = 12
#: A Torque/PBS epilogue's banner ("Begin PBS Epilogue <date>"): what follows it is the ended
#: job's report (its "Job ID:", "User ID:" lines as the prologue printed them), no new launch.
_EPILOGUE = "Epilogue"


def _relaunches(lines: Sequence[str], heads: Sequence[int], exits: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """(exit, start) of each launch of the program run again with its output appended to the same
    file (``python train.py >> run.log 2>&1`` after a crash): two consecutive opening prints of the
    file (:func:`_opening_pairs`) printed again in the same order within ``_AFTER_EXIT`` lines after
    the exception line of a traceback the interpreter printed as it exited
    (:func:`completion.process_exit`: unprefixed, from the top level, uncaught), before any other
    traceback starts, when that traceback's top-level script is the one whose traceback first ended
    a process in the file (the program that printed the opening). Another script's exit followed by
    them (a pipeline's job script going on to its next stage, README P11: one attempt), a caught
    error, a rank's traceback behind a prefix, or opening prints that follow no exit start nothing."""
    pairs = _opening_pairs(lines, min(heads[0], _OPENING)) if heads else set()
    out = []
    for h, end in exits if pairs else ():
        j = _pair_after(lines, end, pairs) if _script(lines[h + 1]) == _script(lines[exits[0][0] + 1]) else None
        if j is not None:
            out.append((end, j))
    return out


#: Words of a log whose program runs as several processes (ranks, a launcher's workers): there one
#: process's uncaught traceback may follow another's in the same launch.
_MANY = ("rank", "Rank", "RANK", "torch.distributed", "torchrun", "NCCL", "mpirun", "srun", "deepspeed", "DeepSpeed",
         "accelerate", "Accelerate", "world_size", "WORLD_SIZE", "multiprocessing", "Worker", "worker", "pid=", "Ray")
#: The first frame of a script's own top level (``python train.py``; runpy's frame of ``python -m``
#: names no one program).
def _exits_again(lines: Sequence[str], heads: Sequence[int], exits: Sequence[tuple[int, int]],
                 starts: Sequence[int]) -> list[tuple[int, int]]:
    """(exit, start) where a single-process program, after its uncaught traceback ended the process
    (:func:`uncaught.process_exit`: CPython prints it from ``sys.excepthook`` and exits 1, so no
    line of that process's top level runs after it), prints an uncaught traceback from the same
    script's top level again: from another top-level statement, or with the same exception again
    after output of its own (the new process's imports, warnings). The script was run again with its
    output appended to the same file (a job's stderr file appended by each job, a shell loop, a
    retry); the start is the first line after the exit. Never in a log of several processes
    (:data:`_MANY`), where each rank prints its own report, nor across a chained exception's
    separator; a pipeline that runs one program on other inputs fails at the same statement with
    another message (another file name), and wandb's console capture (output.log) prints the
    uncaught traceback twice in a row: no new start there, nor where a start (a scheduler's report)
    lies between the two already."""
    if len(exits) < 2 or find_keys(lines, _MANY, 0):
        return []
    out = []
    for (h, end), (h2, end2) in zip(exits, exits[1:], strict=False):
        if module_frame(lines[h + 1]) is None or _script(lines[h + 1]) != _script(lines[h2 + 1]) \
                or lines[h + 1] == lines[h2 + 1] and not _same_again(lines, end, h2, end2) \
                or any(end < s <= h2 for s in starts):
            continue
        if any(end < x < h2 for x in heads) or any(m in lines[k] for k in range(end + 1, h2) for m in _ONE_REPORT):
            continue  # another traceback between them, or the report of one exception goes on
        out.append((end, next(k for k in range(end + 1, h2 + 1) if lines[k].strip())))
    return out


#: Lines between two tracebacks of one exception's report: a chain's separator ("During handling of the
#: above exception, ...", "The above exception was the direct cause ..."), and CPython's report of a
#: failed ``sys.excepthook`` (Python/pythonrun.c ``_PyErr_PrintEx``: "Error in sys.excepthook:", the
#: hook's traceback, then "Original exception was:" and the exception's own).
_ONE_REPORT = ("above exception", "Original exception was", "Error in sys.excepthook")


def _same_again(lines: Sequence[str], end: int, head: int, end2: int) -> bool:
    """Whether the traceback at ``head`` (its exception line ``end2``) ends with the exception line
    ``end`` ends with, and unindented lines of output (a new process's) come between them."""
    return lines[end] == lines[end2] and any(lines[k].strip() and not lines[k][:1].isspace() for k in range(end + 1, head))


#: The exception line of a Ctrl-C that reached the interpreter's top level uncaught.
_INTERRUPT = "KeyboardInterrupt"


def _after_interrupts(lines: Sequence[str], exits: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """(exit, start) after each uncaught ``KeyboardInterrupt`` the interpreter printed as it exited
    (:func:`completion.process_exit`): since Python 3.8 (bpo-1054041, Modules/main.c
    ``exit_sigint``) such a process ends by SIGINT itself, so the shell that ran it (a job script,
    ESPnet's ``run.sh``/``asr.sh``) stops too, and a launch line after it (:func:`_launch_at`) is
    a new launch appended to the file (``nohup ... >> log``)."""
    out = []
    for h, end in exits:
        if lines[end].strip() == _INTERRUPT:
            nxt = _launch_at(lines, end + 1, _script(lines[h + 1]))
            if nxt is not None and not _printed_before(lines, nxt, h):
                out.append((end, nxt))
    return out


#: Non-blank lines above an interrupted process's traceback that a launch line after it is compared with.
_BEFORE_INTERRUPT = 20


def _printed_before(lines: Sequence[str], at: int, head: int) -> bool:
    """Whether ``lines[at]`` has the shape (numbers masked) of one of the last ``_BEFORE_INTERRUPT``
    non-blank lines above the traceback header ``head``: the interrupted run's own output going on
    (the per-sample prints of its DataLoader workers, which finish the batches they hold while the
    main process exits), never a new launch's opening print."""
    return line_shape(lines[at]) in shapes_above(lines, head, _BEFORE_INTERRUPT)


#: Python's warnings module prints "path:LINE: CategoryWarning: message" and the source line below
#: it (``warnings.formatwarning``): import-time warnings of a new launch come before its own lines.
_PY_WARNING = re.compile(r"^\S+:\d+: \w*Warning: ")
#: What the interrupted process (its ``atexit`` hooks: wandb's teardown, "Exception ignored in
#: atexit callback") or its launcher (torchrun's elastic agent closing the other workers, the
#: terminal's echoed "^C") still prints after the traceback: the same launch.
_SAME_LAUNCH = ("wandb:", "Exception ignored", "^C", "torch.distributed")


def _launch_at(lines: Sequence[str], at: int, script: str) -> int | None:
    """The first line from ``at`` (blank lines and Python warnings skipped) when a launch starts
    there: an unprefixed banner-like line (:func:`_banner`) or the traceback header of another top-level
    script; None when it is the interrupted launch's own after-exit output, a rank's or a Ray
    worker's prefixed line, an indented line, a progress line or the same script's traceback."""
    k = at
    while k < len(lines) and (not lines[k].strip() or _PY_WARNING.match(lines[k]) or lines[k][:1].isspace()):
        k += 1
    if k >= len(lines) or k - at > _AFTER_EXIT or lines[at][:1].isspace():
        return None
    ln = lines[k]
    if ln.rstrip() == _TB:
        return k if k + 1 < len(lines) and _script(lines[k + 1]) != script else None
    plain = logs.normalize_line(ln)
    if plain.startswith(_SAME_LAUNCH) or any(m in ln for m in _SAME_LAUNCH[2:]) or prefix_free(plain) != plain:
        return None
    return k if _banner(ln) else None


def _script(frame: str) -> str:
    """The file a traceback's frame line names (``  File "train.py", line 12, in <module>``)."""
    return frame.split('"')[1] if frame.count('"') >= 2 else frame


def _opening_pairs(lines: Sequence[str], head: int) -> set[tuple[str, str]]:
    """Pairs of consecutive lines among ``lines[:head]``, each an opening print (:func:`_opening`)
    printed once there (a line every rank prints at start repeats in any launch's head)."""
    once = {ln for ln in lines[:head] if lines[:head].count(ln) == 1 and _opening(ln)}
    return {(lines[k], lines[k + 1]) for k in range(head - 1) if lines[k] in once and lines[k + 1] in once}


def _pair_after(lines: Sequence[str], end: int, pairs: set[tuple[str, str]]) -> int | None:
    """The first line within ``_AFTER_EXIT`` lines after ``end`` that starts one of ``pairs``;
    None when none does before a traceback, a chained exception's separator or an epilogue."""
    for j in range(end + 1, min(len(lines) - 1, end + 1 + _AFTER_EXIT)):
        if "Traceback" in lines[j] or "exception" in lines[j] or _EPILOGUE in lines[j]:
            return None  # another report, the chain goes on ("During handling of the above exception, ..."), the job's end
        if (lines[j], lines[j + 1]) in pairs:
            return j
    return None


def _opening(line: str) -> bool:
    """A program's own opening print: a banner-like line (:func:`_banner`) that starts with a letter
    or digit (no table row, no frame) and says no error."""
    s = line.strip()
    return len(s) >= 8 and s[0].isalnum() and _banner(line) and _ERRORISH.search(s) is None


#: Words of an error message, never a program's opening print.
_ERRORISH = re.compile(r"(?i)error|exception|fail")


#: An attempt is longer than this many lines (the gap between two starts, and what a repeat of
#: the file's first line has after it).
_MIN_ATTEMPT = 3
_SLURM_KILL = "CANCELLED AT"
#: GNU nohup says so on stderr once, when it starts a command whose input is a terminal ("nohup:
#: ignoring input", "nohup: ignoring input and appending output to 'nohup.out'"): with ``nohup cmd
#: >> log 2>&1 &`` each launch appended to the log begins with it.
_NOHUP = "nohup: ignoring input"
#: Torque/PBS sites print a prologue banner at each job's start ("Begin PBS Prologue <date>"),
#: framed by a ruler of dashes; jobs appended to one output file are separated by it.
_PBS = "Begin PBS Prologue"
#: YOLOX's ``Trainer.before_train`` (yolox/core/trainer.py) logs "args: {}" of the launch's
#: argparse Namespace first, then "exp value:", through loguru in ``setup_logger``'s format (yolox/
#: utils/logger.py: "{time} | {level: <8} | {name}:{line} - {message}", some releases with the
#: function name too); loguru appends every launch to ``train_log.txt`` (mode "a"), rank 0 alone writes
#: it. Matched at the line's start only: never behind another prefix.
_YOLOX = "yolox.core.trainer:"
_YOLOX_ARGS = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? \| INFO +\| yolox\.core\.trainer:(?:before_train:)?\d+ - args: ")
#: ESPnet's recipe scripts (egs2/TEMPLATE/asr1/asr.sh, tts.sh, enh.sh ...) define ``log()`` as
#: ``echo -e "$(date '+%Y-%m-%dT%H:%M:%S') (${fname}:${BASH_LINENO[0]}:${FUNCNAME[1]}) $*"`` and
#: begin with ``log "$0 $*"``: the script's own command line, logged once per launch.
_ESPNET = ":main) "
_ESPNET_CALL = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d \(([\w.-]+\.sh):\d+:main\) (?:\S*/)?([\w.-]+\.sh)(?: |$)")


def _espnet_call(line: str) -> str | None:
    """The script an ESPnet ``log "$0 $*"`` line names when it names itself, else None."""
    m = _ESPNET_CALL.match(line)
    return m.group(1) if m is not None and m.group(1) == m.group(2) else None


def _espnet_first(lines: Sequence[str]) -> str | None:
    """The script of the file's first ESPnet self-call (the launched one, not a nested one)."""
    return next((c for i in find_keys(lines, (_ESPNET,), 0) if (c := _espnet_call(lines[i])) is not None), None)


#: VAR's ``SyncPrint`` (``utils/misc.py`` of FoundationVision/VAR, copied by Infinity and others) tees stdout and
#: stderr into ``local_output/stdout.txt`` and ``stderr.txt``, opened for appending, and when the file exists writes
#: ``'\n'*7 + '='*55 + f'   RESTART {time_str()}   ' + '='*55`` first: each relaunch starts at that banner.
_RESTART = "   RESTART ["
_RESTART_BANNER = re.compile(r"^={55}   RESTART \[[\d\- :]+\]   ={55}\s*$")

#: The keys of lines that may start an attempt (beside a repeat of the file's first line).
_STARTS = (_LSF, _PBS, _NOHUP, _SLURM_KILL, _YOLOX, _ESPNET, _RESTART)


def _before_ruler(lines: Sequence[str], at: int) -> int:
    """The prologue banner's first line: the ruler just above ``at`` when there is one."""
    return at - 1 if at > 0 and lines[at - 1].strip().startswith("---") else at

_KILLED_JOB = re.compile(r"\*\*\* JOB \d+ ON \S+ CANCELLED AT")


def _after_kill(lines: Sequence[str], at: int) -> int | None:
    """Where the next attempt starts after Slurm cancelled a job at ``at``: the next line, when
    what follows is a new job's output (not the dying job's last progress lines or errors, which it prints
    until the signal reaches it: a tracker's warning then its next step);
    else None (no new attempt)."""
    nxt = next((k for k in range(at + 1, min(len(lines), at + 20)) if lines[k].strip()), None)
    if nxt is None or len(lines) - nxt < 5 or is_progress(lines[nxt]) or "srun: error" in lines[nxt] \
            or is_failure(logs.normalize_line(lines[nxt]), lines[nxt]):
        return None
    if line_shape(lines[nxt]) in shapes_above(lines, at, _DYING_LINES):
        return None  # a line the job printed just before the kill, again: its output until the signal reached it
    if _script_trace_only(lines, nxt):
        return None  # the dying job script's own clean-up (its trap), traced by ``set -x``: no new job's output
    return nxt


#: A line bash's ``set -x`` traces (``+ cmd``; ``++ cmd`` one level down: a function, a command substitution),
#: and a traced ``echo`` whose output is the next line (bash prints the expanded arguments, quoted when they hold
#: blanks).
_XTRACE = re.compile(r"^\++ \S")
_TRACED_ECHO = re.compile(r"^\++ echo (?:-[ne] )?(['\"]?)(.*)\1\s*$")


def _script_trace_only(lines: Sequence[str], start: int) -> bool:
    """Whether ``lines[start:]`` hold nothing but the job script's ``set -x`` trace and what its traced ``echo``
    commands print: a ``trap cleanup`` running as the scheduler's signal ends the job (a stopped container, a
    removed folder), not a program's output; a new job appended after a kill prints its own lines."""
    echoed: str | None = None
    for line in lines[start:]:
        text = line.strip()
        if not text:
            continue
        if _XTRACE.match(line):
            m = _TRACED_ECHO.match(text)
            echoed = m.group(2).strip() if m is not None else None
            continue
        if echoed is None or text != echoed:
            return False
        echoed = None
    return True


#: Lines above a Slurm kill whose shapes the next line is compared with (the dying job's own output).
_DYING_LINES = 5


def _first_banner(lines: Sequence[str]) -> str | None:
    """The line whose repeat starts an attempt: the file's first line (of 8 or more characters among
    its first 5) when it is a banner; when it is a ruler, the banner line it and the same ruler frame (a program's
    header printed between rulers at each launch, osprey's ``print_header``: a ruler of "=", "= osprey
    is a tool for machine learning hyperparameter optimization. =", the ruler again)."""
    head = [ln for ln in lines[:5] if len(ln.strip()) >= 8]
    if not head:
        return None
    if _ruler(head[0]):
        framed = len(head) > 2 and lines[0] == head[0] == head[2] and _banner(head[1])
        return head[1] if framed else None
    return head[0] if _banner(head[0]) else None


#: A logger's timestamp at a line's start, date and time ("[2021/06/17 16:07:55] ", "[10/05 20:24:26] ",
#: "2024-01-02 10:00:00,123 - "): Python logging's ``%(asctime)s`` (``logging.Formatter.formatTime``,
#: "%Y-%m-%d %H:%M:%S,mmm"), PaddleOCR's and PaddleVideo's loggers (ppocr/utils/logging.py,
#: paddlevideo/utils/logger.py: ``datefmt="%Y/%m/%d %H:%M:%S"`` / ``"%m/%d %H:%M:%S"`` in "[%(asctime)s]").
_STAMP = re.compile(r"^\[?(?:\d{4}[/-])?\d\d[/-]\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?\]?(?: - | )")


def _unstamped(line: str) -> str | None:
    """The text of a timestamped first line after its timestamp (:data:`_STAMP`), when it names
    something (8 characters or more), else None: each launch prints it again at another time."""
    m = _STAMP.match(line)
    rest = line[m.end():].strip() if m is not None else ""
    return rest if len(rest) >= 8 and _WORD.search(rest) else None


def _side_by_side(lines: Sequence[str], found: Sequence[int], stamped: str) -> bool:
    """Whether two copies of a timestamped first line (text ``stamped``) lie within two lines of each
    other: each process of one launch logs it (DeepSpeed's accelerator/real_accelerator.py
    ``get_accelerator`` logs "Setting ds_accelerator to cuda" in the launcher and in every rank as
    each imports it), so its copies are no launch's start."""
    copies = [k for k in found if _unstamped(lines[k]) == stamped]
    return any(b - a <= 2 for a, b in zip(copies, copies[1:], strict=False))


def _same_next(lines: Sequence[str], at: int, first: int) -> bool:
    """Whether the line after ``at`` says what the line after the file's first banner says, timestamps
    aside: a launch prints its opening lines in the same order again, while a pipeline's next stage
    logs its own (another data set, another model) after the same logger's first line."""
    def text(k: int) -> str:
        return (_unstamped(lines[k]) or lines[k].strip()) if k < len(lines) else ""
    return at + 1 < len(lines) and text(at + 1) == text(first + 1)


def _ruler(line: str) -> bool:
    """A line of one repeated punctuation character (``====``, ``----``)."""
    s = line.strip()
    return len(s) >= 8 and len(set(s)) == 1 and not s[0].isalnum()


def _banner(line: str) -> bool:
    """Whether a first line can mark an attempt's start when printed again (a job script's
    banner, a date, a command line), not a line any run prints many times (a traceback header,
    an error, a progress line, a warning)."""
    s = logs.normalize_line(line).strip()
    return not (line.startswith((" ", "\t")) or _WORD.search(s) is None or "Traceback" in s or "Warning" in s
                or is_progress(line) or is_failure(s, line))


#: A banner names something: a ruler of ``=`` or ``-`` (printed around every section) does not.
_WORD = re.compile(r"[A-Za-z0-9]{3}")


def _after_lsf_report(lines: Sequence[str], at: int) -> int:
    """Where the attempt of the LSF report at ``at`` ends: the report heads its output ("The
    output (if any) follows") or closes it ("... is above this job summary")."""
    for j in range(at, min(len(lines), at + _LSF_REPORT)):
        if _LSF_ABOVE in lines[j]:
            k = j + 1
            while k < len(lines) and (not lines[k].strip() or lines[k].startswith(("PS:", "Read file <"))):
                k += 1  # the report's footnote (where stderr went)
            return k
        if _LSF_FOLLOWS in lines[j]:
            return at
    return at


_LSF_ABOVE = "The output (if any) is above this job summary"
_LSF_FOLLOWS = "The output (if any) follows"
_LSF_REPORT = 400


def new_in_last(lines: Sequence[str], starts: Sequence[int], good: int | None, limit: int = 8) -> list[str]:
    """Error and environment lines of the last attempt that the attempt starting at ``good``
    (the last one that did not fail) did not show (numbers masked when comparing)."""
    if good is None or len(starts) < 2:
        return []
    last = starts[-1]
    end_good = next((s for s in starts if s > good), last)
    seen = {line_shape(ln) for ln in _interesting(lines, good, end_good)}
    out: list[str] = []
    for ln in _interesting(lines, last, len(lines)):
        shape = line_shape(ln)
        if _ENV.search(ln):  # a version or a host: the numbers are what changed
            shape = logs.normalize_line(ln).strip()
            seen.update(logs.normalize_line(x).strip() for x in _interesting(lines, good, end_good) if _ENV.search(x))
        if shape not in seen:
            seen.add(shape)
            out.append(logs.normalize_line(ln).strip()[:200])
            if len(out) >= limit:
                break
    return out


def _interesting(lines: Sequence[str], start: int, stop: int) -> list[str]:
    env = [ln for ln in lines[start:min(stop, start + _ENV_LINES)] if _ENV.search(ln)]
    errs = [lines[i] for i in find_keys(lines, ("rror", "ERROR", "Exception", "Killed", "CANCELLED"), start, stop)
            if is_failure(logs.normalize_line(lines[i]), lines[i])]
    return env + errs
