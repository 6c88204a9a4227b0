"""The exception lines of a chain that state the root error (README rule R4: the first exception
line of a chain and its last, nothing in between; an embedded original counts, a wrapper counts
by the original it re-raises; R7: a root error and the terminal one), the exceptions printed with
a root error line above the failure scan's reach, and where a failure was reported (its phase).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from gpulens.diagnosis import logs
from gpulens.diagnosis.guarded import remembered
from gpulens.diagnosis.logread import ranks
from gpulens.diagnosis.logread.indicators.copies import (
    bare_shape,
    message_shape,
    restates,
    without_digits,
)
from gpulens.diagnosis.logread.indicators.markers import is_report_head
from gpulens.diagnosis.logread.indicators.origins import AROUND
from gpulens.diagnosis.logread.indicators.rooterror import is_root_error
from gpulens.diagnosis.logread.indicators.runs import printing
from gpulens.diagnosis.logread.lines import is_benign
from gpulens.diagnosis.logread.records import unlogged
from gpulens.diagnosis.logread.tracebacks import (
    EXCEPTION,
    TRACEBACK,
    chain_start,
    chained,
    has_head,
    norm_body,
    python_head,
    traceback_head,
    unprefixed,
)

__all__ = ["failure_point", "printed_with", "root_lines", "wraps"]


#: Lines that only wrap or announce an exception printed in full elsewhere (rules R2, R4): Ray's
#: ``RayTaskError(X): ray::Actor.method()`` header, PyTorch's "Caught X in DataLoader worker
#: process N." / "in replica N on device N." / "in pin memory thread for device N." re-raise (torch/_utils.py
#: ``ExceptionWrapper.reraise``; the pin-memory thread's ``where`` in torch/utils/data/_utils/pin_memory.py), a thread's traceback header, the
#: ``sys.excepthook`` failure header, Ray's log of a task's
#: error nobody retrieved, whose message is the task's traceback ("Unhandled error (suppress with
#: 'RAY_IGNORE_UNHANDLED_ERRORS=1'): ray::Trainer.train() (pid=4242, ip=10.0.0.5)", then its frames
#: and its exception line: ray/_private/worker.py, _unhandled_error_handler). Not an exception that points at the error
#: printed above it in another process (vLLM's "RuntimeError: Engine core initialization failed. See root cause
#: above."): that is the process-ending error whose link to the root the log shows, README R7's terminal line (every
#: dev row with such a line labels it).
_WRAPPER = re.compile(r"^(?:\S*RayTaskError\(\w+\): |(?:.*[\s\]])?Unhandled error \(suppress with |(?:\S+\.)?\w+: Caught \w+ in (?:DataLoader worker process|replica|pin memory thread for device) "
                      r"|Exception in thread \S.*:$|Error in sys\.excepthook:$)")


def root_lines(lines: Sequence[str], own: Sequence[int], norm: Callable[[int], str]) -> list[int]:
    """The first root error line and the exception that ended the process when it is another
    message (README rule R4: the first exception line of a chain and its last, nothing in
    between; R7: a root error and the terminal one). A chain printed again (a logger's copy
    before the interpreter's, Python's reprint after a failed ``sys.excepthook``) counts at its
    first printing."""
    norm = _joined(lines, norm)
    own = [i for i in own if not _embeds(lines, i, norm)] or list(own)
    # a child's exit as its parent raises it counts only when the child showed no error (R8)
    own = [i for i in own if _CHILD_EXIT.match(ranks.strip_prefix(norm(i)).strip()) is None] or own
    # a wrapper counts by the original it re-raises (R4: "Caught X in DataLoader worker process N.")
    own = [i for i in own if not wraps(ranks.strip_prefix(norm(i)).strip())] or own
    last = next((i for i in reversed(own) if EXCEPTION.match(norm(i))), None)
    if last is None:  # no exception line (a program's own error message): its first line
        return list(own[:1])
    printings: dict[int, list[int]] = {}
    for i in own:
        if EXCEPTION.match(norm(i)):
            printings.setdefault(printing(lines, i, own[0]), []).append(i)
    final = printings[printing(lines, last, own[0])]
    shapes = [bare_shape(norm(i)) for i in final]
    again = next((p for p in printings.values() if p[-1] < final[0] and [bare_shape(norm(i)) for i in p] == shapes), None)
    chain = again if again is not None else final
    out = [own[0]]
    root = printings.get(printing(lines, own[0], own[0]), [])
    if root and all(any(restates(message_shape(norm(i)), message_shape(norm(k))) for k in root) for i in chain):
        chain = root  # the final chain printed again (another process's copy): the root's printing says it first
    said = out + (root if chain is not root else [])  # another printing of the root's chain: its messages are said
    for i in (chain[0], chain[-1]):  # the chain's first (when the first line is not in it) and its last
        if _new_message(i, said, chain, norm):
            out.append(i)
            said.append(i)
    return out


def _new_message(i: int, said: Sequence[int], chain: Sequence[int], norm: Callable[[int], str]) -> bool:
    """Whether the exception line ``i`` says what none of ``said`` says: by :func:`copies.message_shape` (another
    process's copy names its own GPU, file or port), but by the names it quotes against a line of
    its own ``chain`` (R4: "NameError: name 'accelerator' is not defined" handled, then "NameError:
    name 'logger' is not defined" are two messages of one process)."""
    return all(k in chain and not restates(without_digits(norm(i)), without_digits(norm(k)))
               for k in said if restates(message_shape(norm(i)), message_shape(norm(k))))


#: The exception a parent raises when its child process exited non-zero (subprocess.run's
#: check / check_returncode: "subprocess.CalledProcessError: Command '[...]' returned non-zero exit
#: status 1.", CPython Lib/subprocess.py; torchrun's "torch.distributed.elastic.multiprocessing.
#: errors.ChildFailedError:"): a launcher's verdict (README rule R8), not the child's error.
_CHILD_EXIT = re.compile(r"(?:[\w.]+\.)?(?:CalledProcessError|ChildFailedError)\b")


def _joined(lines: Sequence[str], norm: Callable[[int], str]) -> Callable[[int], str]:
    """``norm``, with an exception's type alone on its line joined to the message that another
    process's output split off onto the next line ("0: AssertionError" / "0: : SharedMemory
    objects are None."): one exception line, the same as its unsplit copy."""
    def get(i: int) -> str:
        text = norm(i)
        if i + 1 < len(lines) and EXCEPTION.fullmatch(ranks.strip_prefix(text).strip()):
            below = unprefixed(lines[i + 1]).strip()
            if below.startswith(": "):
                return text + below
        return text
    return get


def printed_with(lines: Sequence[str], i: int, mine: Callable[[int], bool]) -> list[int]:
    """The exception lines printed with the root error line ``i`` that the failure scan did not
    reach (above the last progress line of the other ranks, which moves its frontier past them):
    the earlier exceptions of the chain ``i`` ends (README rule R4: the chain's first exception
    line), and an identical copy of the chain printed right before it (rule R5, the earliest
    copy: a rank's traceback printed unprefixed by Python, then again with its ``[rankN]:``
    prefix by torch.distributed's error handler)."""
    body = norm_body(lines[i])
    if not EXCEPTION.match(body):
        return []
    head = python_head(lines, i)
    if head is None:
        return []
    first = chain_start(lines, head, max(0, head - AROUND * 5))
    out = [k for k in _chain_exceptions(lines, first, head) if mine(k)]
    above = next((k for k in range(first - 1, max(-1, first - 4), -1) if lines[k].strip()), None)
    if above is not None and mine(above) and message_shape(norm_body(lines[above])) == message_shape(body) \
            and _last_frame(lines, above) in (None, _last_frame(lines, i)):
        out.append(above)
        prev = traceback_head(lines, above)
        if prev is not None and has_head(lines[prev]):
            start = chain_start(lines, prev, max(0, prev - AROUND * 5))
            out += [k for k in _chain_exceptions(lines, start, prev) if mine(k)]
    return out


def _last_frame(lines: Sequence[str], i: int) -> str | None:
    """The innermost ``File "...", line N, in f`` frame of the traceback the exception line ``i`` ends (without a
    rank prefix), where the exception was raised: a copy of one traceback raised it in the same place; two
    processes stopped by one message (``KeyboardInterrupt`` in two imports) did not."""
    head = traceback_head(lines, i)
    for k in range(i - 1, -1 if head is None else head, -1):
        text = unprefixed(lines[k]).strip()
        if text.startswith('File "'):
            return text
    return None


def _chain_exceptions(lines: Sequence[str], first: int, last_head: int) -> list[int]:
    """The exception lines of the chained tracebacks from ``first`` (a traceback's head) to the
    one headed at ``last_head``: the last non-blank line above each "During handling of the above
    exception" / "The above exception was the direct cause" between them."""
    out = []
    for k in range(first + 1, last_head):
        if chained(lines[k]):
            exc = next((j for j in range(k - 1, max(first, k - 4), -1) if lines[j].strip()), None)
            if exc is not None and EXCEPTION.match(norm_body(lines[exc])) and is_root_error(norm_body(lines[exc])):
                out.append(exc)
    return out


def _embeds(lines: Sequence[str], i: int, norm: Callable[[int], str]) -> bool:
    """Whether the exception line ``i`` wraps another process's traceback printed as its message
    (README rule R4: the embedded original counts): multiprocessing's ``RemoteTraceback:`` and
    its triple-quoted traceback, Ray's "The actor with name X failed to import on the worker.
    ...:" (a message ending with a colon, the other traceback below it), PyTorch's "Original
    Traceback", torch.distributed.checkpoint's ``CheckpointException ranks:dict_keys([0])`` with
    each rank's "Traceback (most recent call last): (RANK 0)" below it."""
    said = norm(i) if EXCEPTION.match(norm(i)) else logs.normalize_line(unlogged(unprefixed(lines[i]))).strip()
    if not EXCEPTION.match(said):
        return False
    below = [(k, t) for k in range(i + 1, min(len(lines), i + 5)) if (t := unlogged(unprefixed(lines[k])).strip())][:2]
    if not below or below[0][0] >= i + 3:
        return False
    text = below[0][1]
    if text.startswith(TRACEBACK + ":") and len(text) > len(TRACEBACK) + 1:
        return True  # torch.distributed.checkpoint's "Traceback (most recent call last): (RANK 0)"
    if len(below) > 1 and is_benign(logs.normalize_line(text)):
        text = below[1][1]  # the other process's warning printed before its traceback (vLLM's "Error raised in subprocess:")
    return said.endswith(":") and text.startswith((TRACEBACK, _QUOTES, "Original Traceback"))


_QUOTES = '"' * 3


def failure_point(lines: Sequence[str], i: int) -> int:
    """Where the failure whose first indicator line is ``i`` was reported, for reading its phase:
    ``i`` itself, or the exception that printed ``i``'s traceback inside its own report (a
    wrapper embedding another process's traceback, ``sys.excepthook``'s own error before
    "Original exception was:"), which is where the process was when it failed."""
    head = python_head(lines, i)
    if head is None:
        return i
    above = next((k for k in range(head - 1, max(-1, head - 3), -1) if lines[k].strip()), None)
    if above is not None and "Original exception was" in lines[above]:
        above = next((k for k in range(above - 1, max(-1, above - 3), -1) if lines[k].strip()), None)
    if above is None or is_report_head(lines[above]) \
            or not EXCEPTION.match(logs.normalize_line(unprefixed(lines[above])).strip()):
        return i  # not an exception's line ("Exception in thread X:" heads this traceback)
    return above if not chained(lines[above]) else i


@remembered  # asked again about the same failure lines
def wraps(text: str) -> bool:
    """Whether a line (without its prefix) only wraps or announces an exception printed in full
    elsewhere (:data:`_WRAPPER`)."""
    return _WRAPPER.match(text) is not None
