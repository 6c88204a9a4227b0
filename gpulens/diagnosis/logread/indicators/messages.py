"""The lines of one message and of a printed traceback, and which of them shows it (README rules
R2, R3): a traceback's frame or code line behind a logger's or a launcher's prefix, a message's
later lines (a rank's ``[rankN]:`` on each, NCCL's detail lines), TensorFlow's numbered summary
items, a logger's message heading the traceback it prints, ``sys.excepthook``'s own error, and the
C++ log line that said an exception's message before Python printed it (rule R9).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from gpulens.diagnosis import logs
from gpulens.diagnosis.keyscan import find_keys
from gpulens.diagnosis.logread import ranks
from gpulens.diagnosis.logread.indicators.copies import message_shape
from gpulens.diagnosis.logread.indicators.origins import AROUND
from gpulens.diagnosis.logread.lines import has_error_level
from gpulens.diagnosis.logread.records import logger_head, unlogged
from gpulens.diagnosis.logread.tracebacks import (
    CHAINED,
    EXCEPTION,
    TRACEBACK,
    chained,
    has_head,
    norm_body,
    python_head,
    starts_head,
    unprefixed,
)

__all__ = ["code_line", "hook_errors", "later_line", "logged_above", "logged_first", "logged_frame", "logged_record", "not_heads",
           "summary_part"]


def logged_frame(raw: str) -> bool:
    """Whether a line is a frame, a code line or a caret line of a traceback that a launcher or a
    logger prints with its prefix on every line (README rule R2): indented after the prefix (a
    rank's ``[rank3]:``, Ray's ``(Worker pid=7)``, vLLM's ``ERROR 08-25 18:56:06 [core.py:700]``)."""
    body = unprefixed(raw)
    if len(body) != len(raw) and body[:1] in (" ", "\t", "^") and body.strip():
        return True
    if "] " not in body:
        return False
    m = logger_head(body)
    if m is None:
        return False
    rest = body[m.end():]
    return rest[:1] in (" ", "\t", "^") or not rest.strip() or rest.startswith((TRACEBACK, *CHAINED))


#: Lines after "Error in sys.excepthook:" searched for Python's "Original exception was:".
_HOOK_REPORT = 200


def hook_errors(lines: Sequence[str], start: int) -> set[int]:
    """The lines of ``sys.excepthook``'s own error (between "Error in sys.excepthook:" and
    "Original exception was:", which Python prints when the hook fails; a tracker's hook
    interrupted at exit): not the process's error, which follows them (README rule R4)."""
    out: set[int] = set()
    found = find_keys(lines, ("Error in sys.excepthook", "Original exception was"), max(0, start - AROUND))
    for k, i in enumerate(found):
        if "Error in sys.excepthook" in lines[i]:
            end = next((j for j in found[k + 1:] if "Original exception was" in lines[j] and j - i < _HOOK_REPORT), None)
            if end is not None:
                out.update(range(i, end + 1))
    return out


def not_heads(lines: Sequence[str], own: list[int]) -> list[int]:
    """``own`` without the lines that head a traceback printed below them (a logger's
    ``logger.exception("training failed")`` message, a program's ``Error: Traceback (most recent
    call last):``) when a later line of ``own`` states the error: the exception line is the
    error (README rules R2, R3)."""
    return [i for k, i in enumerate(own) if k + 1 == len(own) or not _heads_traceback(lines, i)]


def _heads_traceback(lines: Sequence[str], i: int) -> bool:
    if has_head(lines[i]):
        return True
    if EXCEPTION.match(logs.normalize_line(unlogged(unprefixed(lines[i]))).strip()):
        return False  # an exception line, a logger's too (the next traceback is another printing)
    end = i  # the message's last line: a logger prints all of it, then the traceback (exc_info)
    while end + 1 < len(lines) and _continues(lines, i, end + 1):
        end += 1
    below = next((k for k in range(end + 1, min(len(lines), end + 3)) if lines[k].strip()), None)
    return below is not None and starts_head(unlogged(unprefixed(lines[below])).lstrip(), sacred=True)


#: TensorFlow's summary of several errors in one exception's message (tensorflow/core/platform/
#: status.cc, StatusGroup::as_summary_status): "2 root error(s) found.", then each error on a line
#: "  (0) Resource exhausted: OOM when allocating ...", then "0 successful operations." and "0 derived
#: errors ignored.". The numbered lines are later lines of the message (README rule R3).
_SUMMARY_HEAD = "root error(s) found."
_SUMMARY_END = "successful operations."
_SUMMARY_ITEM = re.compile(r"^\s+\(\d+\) \S")
#: Lines above a numbered line searched for its summary's head (each error may bring its node lines).
_SUMMARY_REACH = 60


def summary_part(lines: Sequence[str], i: int) -> bool:
    """Whether line ``i`` is one of the numbered errors of TensorFlow's "N root error(s) found."
    summary printed above it (not a root error line of its own: the exception line shows it)."""
    body = unprefixed(lines[i])
    if body[:1] not in (" ", "\t") or _SUMMARY_ITEM.match(body) is None:
        return False
    for k in range(i - 1, max(-1, i - _SUMMARY_REACH), -1):
        if _SUMMARY_END in lines[k]:
            return False
        if _SUMMARY_HEAD in lines[k]:
            return True
    return False


#: Lines a message printed over several lines is looked for in below its first.
_MESSAGE_LINES = 4
#: NCCL's detail lines under its error ("NCCL error in: ...ProcessGroupNCCL.cpp:3356, unhandled cuda
#: error ..., NCCL version 2.26.2" / "ncclUnhandledCudaError: Call to CUDA function failed." / "Last
#: error:" / "Cuda failure 2 'out of memory'"): torch's getNcclErrorDetailStr appends them to the message.
_NCCL_DETAIL = "Last error:"


def later_line(lines: Sequence[str], i: int, picked: Sequence[int], failures: Sequence[int]) -> bool:
    """Whether line ``i`` is a later line of a message printed over several lines whose first
    line is a picked line or a failure line (README rule R3: the message is shown by its first
    line, or by the exception line of the traceback a logger's message heads)."""
    near = set(picked) | {k for k in failures if i - _LOGGED_LINES <= k < i}
    return any(_continues(lines, k, i) for k in near) or _tabbed_under(lines, i) in picked


#: Lines above a tab-indented line searched for the message's first line.
_TABBED_REACH = 2000


def _tabbed_under(lines: Sequence[str], i: int) -> int | None:
    """The first line of the message whose later lines, tab-indented, run down to line ``i`` (torch's
    ``Module.load_state_dict``: ``RuntimeError('Error(s) in loading state_dict for {}:\n\t{}'.format(name,
    "\n\t".join(error_msgs)))``, one "Missing key(s)" or "size mismatch for ..." per line); None when ``i``
    is not tab-indented. CPython's traceback indents frames with spaces, never a tab."""
    k = i
    while k > max(0, i - _TABBED_REACH) and unprefixed(lines[k]).startswith("\t"):
        k -= 1
    return k if k < i else None


#: Lines below an error record searched for the traceback its ``exc_info`` prints. CPython's
#: ``logging.Formatter.format`` writes the record's message, then "\n" and ``record.exc_text`` (the
#: formatted traceback, "Traceback (most recent call last):" first): a message of several lines lies
#: between the record's header and that traceback (transformers' ``cached_file``: "You are trying to
#: access a gated repo.\nMake sure to have access to it at ...\n" + huggingface_hub's "401 Client
#: Error.\n\nCannot access gated repo for url ...", blank line included).
_LOGGED_LINES = 8
#: A line that starts a record of its own (Python logging's default asctime "2024-04-24 15:46:03,689").
_RECORD_START = re.compile(r"^\[?\d{4}-\d\d-\d\d[ T]\d\d:\d\d")


def _logged_message_end(lines: Sequence[str], i: int) -> int | None:
    """The last line of the message of the error record at line ``i`` (a logger's ERROR/CRITICAL level) that
    ``logging`` printed with its traceback below it (``logger.exception``, ``exc_info=True``), when the message
    spans several lines (:data:`_LOGGED_LINES`); None when no traceback follows the message, or another record,
    an indented line or another rank's line comes between them."""
    if not has_error_level(lines[i]):
        return None
    rank = ranks.prefix_rank(lines[i])
    for k in range(i + 1, min(len(lines), i + 1 + _LOGGED_LINES)):
        body = unprefixed(lines[k])
        if starts_head(body):
            return k - 1 if k - 1 > i else None
        if body[:1].isspace() or ranks.prefix_rank(lines[k]) != rank or _RECORD_START.match(body) \
                or has_error_level(body) or chained(body):
            return None
    return None


def _continues(lines: Sequence[str], i: int, k: int) -> bool:
    """Whether line ``k`` is a later line of the message whose first line is ``i`` (README rule
    R3: a message spanning several lines is shown by its first): at most _MESSAGE_LINES below it,
    every line between them written by the same rank (torch.distributed prefixes each line of a
    message with its ``[rankN]:``) or, unprefixed, NCCL's detail lines below its error; none of
    them blank, a traceback's head, frame or chain marker."""
    if i < k and k - i <= _LOGGED_LINES and (end := _logged_message_end(lines, i)) is not None:
        return k <= end
    if not i < k <= i + _MESSAGE_LINES:
        return False
    rank = ranks.prefix_rank(lines[i])
    between = lines[i + 1:k + 1]
    for ln in between:
        body = unprefixed(ln)
        if not body.strip() or body[:1].isspace() or ranks.prefix_rank(ln) != rank \
                or has_head(body) or chained(body):
            return False
    return rank is not None or any(unprefixed(ln).strip() == _NCCL_DETAIL for ln in lines[i + 1:i + _MESSAGE_LINES])


def code_line(raw: str) -> bool:
    """Whether a line is a traceback's frame or code line: indented, or indented after a launcher's
    prefix (``[rank3]:     raise X(``)."""
    return raw[:1].isspace() or logged_frame(raw)


#: The header of a line logged by torch's C++ code (c10's glog-style LOG(ERROR)/LOG(FATAL):
#: "[E813 07:25:21.532210515 ProcessGroupGloo.cpp:143] ", "[E ProcessGroupNCCL.cpp:916] ",
#: "E0813 07:25:21.532210 4242 ProcessGroupNCCL.cpp:1595] ").
_CPP_LOGGED = re.compile(r"^\[?[EF](?:\d{3,4} [\d:.]+(?: +\d+)?)? ?[\w./-]+\.(?:cpp|cc|hpp|h):\d+\] ")
#: Lines above a traceback searched for the C++ log line of its exception's message.
_LOGGED_REACH = 40
#: What a C++ log line's header names (its source file), looked for before reading lines closely.
_CPP_FILES = (".cpp:", ".cc:", ".hpp:", ".h:")
#: The lines of a traceback above its exception line within which its C++ log line is looked for.
_FRAMES_REACH = 160


def logged_first(lines: Sequence[str], i: int, norm: Callable[[int], str]) -> int:
    """The line that said the exception line ``i``'s message first: torch's C++ code logs an error
    (LOG(ERROR), with its "[E813 07:25:21 ProcessGroupGloo.cpp:143]" header) and then throws it
    with the same message, which Python prints at the end of its traceback; the same process's
    log line above the traceback is the earliest copy (README rule R9), else ``i``."""
    body = norm_body(lines[i])
    m = EXCEPTION.match(body)
    if m is None or not body[m.end():].startswith(": "):
        return i
    above = "\n".join(lines[max(0, i - _LOGGED_REACH - _FRAMES_REACH):i])
    if not any(k in above for k in _CPP_FILES):
        return i  # no C++ log line above
    message = message_shape(body[m.end() + 2:].strip())
    head = python_head(lines, i) if len(message) >= 30 else None
    if head is None:
        return i
    rank = ranks.prefix_rank(lines[i])
    for k in range(head - 1, max(-1, head - _LOGGED_REACH), -1):
        body = unprefixed(lines[k]).strip()
        got = _CPP_LOGGED.match(body) if body[:1] in "[EF" else None
        if got is not None and ranks.prefix_rank(lines[k]) == rank and message_shape(body[got.end():].strip()) == message:
            return k
    return i


#: The header Python's ``multiprocessing`` writes above the traceback of a child process's uncaught exception
#: (multiprocessing/process.py ``BaseProcess._bootstrap``: ``sys.stderr.write('Process %s:\\n' % self.name)``).
_PROCESS_HEAD = re.compile(r"^Process [\w.-]+:$")


def logged_above(lines: Sequence[str], i: int) -> int:
    """The exception line just above the traceback of the exception line ``i`` (blank lines and multiprocessing's
    "Process NAME:" header between them) when it says the same message, by the same process: a logger logged the
    exception with its traceback (vLLM's engine core: ``logger.exception("EngineCore failed to start.")``) and it
    was printed again as it ended the process; the earliest copy shows it (README rule R9). Else ``i``."""
    head = python_head(lines, i)
    k = -1 if head is None else head - 1
    while k >= 0 and (not lines[k].strip() or _PROCESS_HEAD.match(unprefixed(lines[k]).strip())):
        k -= 1
    if k < 0 or ranks.origin_of(lines[k]) != ranks.origin_of(lines[i]):
        return i
    said = logs.normalize_line(unlogged(unprefixed(lines[k]))).strip()
    return k if EXCEPTION.match(said) and message_shape(said) == message_shape(norm_body(lines[i])) else i


#: A logging record's level name (Lib/logging/__init__.py: the default "%(levelname)s:%(name)s:%(message)s" of
#: ``basicConfig``, and formats that put it between other fields).
_ERROR_RECORD = re.compile(r"(?<![A-Za-z_])(?:ERROR|CRITICAL|FATAL)(?![A-Za-z_])")
#: A terminal control sequence (tqdm's cursor-up "\\x1b[A" between its bars and the next output).
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
#: The shortest exception message matched inside a record (shorter ones say too little to be the same).
_RECORD_MESSAGE = 30


def logged_record(lines: Sequence[str], i: int) -> int:
    """The logger's ERROR record printed just above the traceback of the exception line ``i`` when the record's
    message ends with that exception's message: ``logger.exception(f"Training failed: {e}")`` (or ``logger.error(...,
    exc_info=True)``): logging writes the record's line, then the traceback (Lib/logging/__init__.py
    ``Formatter.format`` appends ``formatException``); the record is the error's first printing (README R4, R9), also
    where a progress bar's last refresh has no newline before it. Else ``i``."""
    body = norm_body(lines[i])
    m = EXCEPTION.match(body)
    if m is None or not body[m.end():].startswith(": "):
        return i
    message = body[m.end() + 2:].strip()
    head = python_head(lines, i) if len(message) >= _RECORD_MESSAGE else None
    k = -1 if head is None else head - 1
    while k >= 0 and not lines[k].strip():
        k -= 1
    if k < 0 or ranks.origin_of(lines[k]) != ranks.origin_of(lines[i]):
        return i
    text = _ANSI.sub(" ", logs.normalize_line(unprefixed(lines[k])).strip())
    at = text.rfind(message[:_RECORD_MESSAGE])
    return k if at > 0 and text[at:].startswith(message[:len(text) - at]) and _ERROR_RECORD.search(text[:at]) else i
