"""One message printed more than once (README rule R5: the error once, at its earliest printing):
a message's shape with its numbers and quoted names blanked (the same error of another GPU,
process or temporary file), whether two exception lines state one error, and whether a line is a
copy of one already picked (another rank's, a logger's ``logger.error(f"...: {e}")`` before the
traceback, the C++ runtime's ``what():`` restating a logged message).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence

from gpulens.diagnosis.guarded import remembered
from gpulens.diagnosis.logread import ranks
from gpulens.diagnosis.logread.lines import SLURM_JOB
from gpulens.diagnosis.logread.tracebacks import EXCEPTION

__all__ = ["bare_shape", "copy_of", "message_shape", "restates", "what_said", "without_digits"]


@remembered  # the filters compare each failure line's shape with those of the others
def message_shape(text: str) -> str:
    """A message with its numbers and quoted names blanked (the same error of another GPU,
    process or temporary file)."""
    if "*** " in text:  # Slurm's cancel of the job and of its step: one message
        text = _SLURM_STEP.sub("*** JOB #", text)
    return without_digits(_QUOTED.sub("'…'", text))


_SLURM_STEP = re.compile(SLURM_JOB)
_DIGITS = re.compile(r"\d+")
_QUOTED = re.compile(r"'[^'\s]*'")


def bare_shape(norm: str) -> str:
    """The shape of a message without its launcher's prefix (a rank's copy of a chain is the same chain)."""
    return message_shape(ranks.strip_prefix(norm).strip())


def restates(a: str, b: str) -> bool:
    """Whether two exception lines state one error: the same message, or one is the other
    under a wrapper's type (JAX's "JaxStackTraceBeforeTransformation: ValueError: x" and the
    "ValueError: x" it re-raises)."""
    return a == b or a.endswith(": " + b) or b.endswith(": " + a)


def what_said(text: str, said: set[str]) -> bool:
    """Whether ``text`` is the C++ runtime's ``what():`` line under "terminate called after
    throwing an instance of ..." restating a message already picked (the watchdog's "[Rank 0] NCCL
    watchdog thread terminated with exception: ..." logged, then thrown): README rule R6, the
    error is named once."""
    if _WHAT not in text[:40]:
        return False
    body = message_shape(text.split(_WHAT, 1)[1].strip())
    return len(body) > 20 and any(t.endswith(body) for t in said)


_WHAT = "what():"


#: The shortest exception message whose copy in a logged line is looked for (a word or two is no copy).
_COPY_MIN = 30


def _logged_message(exc: str, line: str) -> bool:
    """Whether ``line`` ends with the message of the exception line ``exc``: a program logged the
    error it caught (``logger.error(f"engine init failed: {e}")``), then its traceback (README rule
    R5: the error once, at its earliest printing)."""
    m = EXCEPTION.match(exc)
    if m is None or not exc.startswith(": ", m.end()) or EXCEPTION.match(line) is not None:
        return False
    message = message_shape(exc[m.end() + 2:].strip())
    return len(message) >= _COPY_MIN and message_shape(line).endswith(": " + message)


def _interleaved(exc: str, line: str) -> bool:
    """Whether ``line`` holds two or more processes' printings of the exception line ``exc`` written into each
    other: CPython's default excepthook writes an exception's last line in pieces (Python/pythonrun.c
    ``print_exception``: the module and type name, then ": ", then the message), and processes sharing one stderr
    interleave at those writes ("ModuleNotFoundErrorModuleNotFoundError: : No module named 'x'No module named 'x'"):
    ``exc`` is a copy of it (README rule R5: the error once, at its earliest printing)."""
    m = EXCEPTION.match(exc)
    if m is None or not exc.startswith(": ", m.end()):
        return False
    kind, message = exc[:m.end()].rsplit(".", 1)[-1], exc[m.end() + 2:].strip()
    return len(message) >= _INTERLEAVED_MIN and line.count(kind) >= 2 and message in line


#: The shortest message looked for in interleaved printings.
_INTERLEAVED_MIN = 12


#: torch's CUDA caching allocator's out-of-memory message (c10/cuda/CUDACachingAllocator.cpp: "CUDA out of memory.
#: Tried to allocate 4.43 GiB. GPU 0 has a total capacity of 79.14 GiB of which 1.74 GiB is free. Process 3455906 has
#: 10.67 GiB memory in use. ..."): its figures and its list of processes differ from one process's printing to another's.
_CUDA_OOM = re.compile(r"(?:\w+\.)*(?:OutOfMemoryError|RuntimeError): CUDA out of memory\. Tried to allocate ")


def _both_oom(text: str, said: str) -> bool:
    """Whether two exception lines are both torch's CUDA out-of-memory error (README rule R5: the same error
    printed by other processes, with other numbers, is a copy)."""
    return _CUDA_OOM.match(text) is not None and _CUDA_OOM.match(said) is not None


def copy_of(i: int, text: str, seen: Sequence[tuple[int, str]], chained: Collection[int]) -> bool:
    """Whether line ``i`` (its message ``text``) restates one of ``seen`` (index, message): by
    :func:`message_shape`, except two lines of ``chained`` that quote other names; any two CUDA
    out-of-memory errors."""
    for k, said in seen:
        if _both_oom(text, said):
            return True
        if not restates(message_shape(text), message_shape(said)):
            if _logged_message(text, said) or _logged_message(said, text) or _interleaved(text, said) \
                    or _interleaved(said, text):
                return True
            continue
        if i in chained and k in chained and not restates(without_digits(text), without_digits(said)):
            continue  # two messages of one chain
        return True
    return False


@remembered
def without_digits(text: str) -> str:
    """``text`` with its runs of digits blanked ("#"): the names it quotes kept (two messages of one chain)."""
    return _DIGITS.sub("#", text)
