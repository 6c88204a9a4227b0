"""The data reader's own error behind PaddlePaddle's report that its reader died: ``paddle.io.DataLoader``
reads batches in a thread (``dataloader_iter.py`` ``_thread_loop``); when the thread raises, Python prints
"Exception in thread ..." with its traceback, and the main process then fails on the dead queue ("SystemError:
(Fatal) Blocking queue is killed because the data reader raises an exception.") or blocks in the reader's
C++ ``MultiDeviceFeedReader::WaitFutures`` until the launcher's SIGTERM stops it. The thread's exception is the
failure; a worker process's error reaches it as "DataLoader worker(N) caught X with message:" and that
traceback's text, its newlines escaped (``paddle/io/dataloader/worker.py`` ``_WorkerException.reraise``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from gpulens.diagnosis.hints import hint_for
from gpulens.diagnosis.keyscan import find_keys
from gpulens.diagnosis.logread.cause.badrecord import EITHER_READING
from gpulens.diagnosis.logread.tracebacks import EXCEPTION, TRACEBACK
from gpulens.diagnosis.types import Diagnosis
from gpulens.vocab import NO_FAILURE

__all__ = ["READER_DIED_KEYS", "reader_thread_root"]

#: The main process's side of a reader thread that died (the queue's error; the C++ reader waiting on it).
READER_DIED_KEYS = ("Blocking queue is killed because the data reader raises an exception",
                    "MultiDeviceFeedReader")
#: The reader thread's frame in its traceback.
_THREAD_LOOP = "in _thread_loop"
#: Lines above the reader's death searched for the thread's traceback.
_READER_LOOKBACK = 400
#: Lines of a traceback read for the thread's frame.
_FRAMES = 12
#: Paddle's wrapper of a worker's exception: its message is the worker's traceback, newlines escaped.
_CAUGHT = "caught "


def reader_thread_root(d: Diagnosis, lines: Sequence[str], floor: int, start: int,
                       classify: Callable[[str], Diagnosis]) -> Diagnosis:
    """For an error context that shows Paddle's reader died (:data:`READER_DIED_KEYS` in ``lines[start:]``),
    the reader thread's own exception above it, classified with ``classify``, when a rule decides it; else ``d``."""
    died = find_keys(lines, READER_DIED_KEYS, start)
    if not died:
        return d
    text = _thread_error(lines, max(floor, start - _READER_LOOKBACK), died[0])
    if text is None:
        return d
    got = classify(text)
    if got.method != "rule" or got.category in ("unknown", NO_FAILURE) or got.category == d.category:
        return d
    why = "PaddlePaddle's data reader thread raised; its own error decides, not the main process's failure on the dead reader"
    if got.category == "semantic_error" and _either_reading(text):
        got = dataclasses.replace(got, category="incorrect_input", rule_id=None,
                                  hint=hint_for("incorrect_input", got.evidence))
        why += " (raised in data-reading code: README C4)"
    return dataclasses.replace(got, confidence=round(got.confidence * 0.9, 3), file=d.file, reason=why)


def _either_reading(text: str) -> bool:
    """Whether the thread's last exception is one whose message could be the data's or the code's
    (:data:`badrecord.EITHER_READING`): in the reader, data-reading code, README C4 makes it incorrect_input."""
    last = next((m for ln in reversed(text.splitlines()) if (m := EXCEPTION.match(ln))), None)
    return last is not None and last.group("name") in EITHER_READING


def _thread_error(lines: Sequence[str], lo: int, hi: int) -> str | None:
    """The text of the last traceback in ``lines[lo:hi]`` that runs through the reader thread's loop, with a
    worker's escaped traceback unescaped; None without one."""
    for head in reversed(find_keys(lines, (TRACEBACK,), lo, hi)):
        if not any(_THREAD_LOOP in ln for ln in lines[head:head + _FRAMES]):
            continue
        end = next((k for k in range(head + 1, hi) if lines[k][:1] not in (" ", "\t") and lines[k].strip()), hi - 1)
        block = list(lines[head:end + 1])
        if _CAUGHT in block[-1] and "\\n" in block[-1]:
            block[-1:] = block[-1].replace("\\n", "\n").splitlines()
        return "\n".join(block)
    return None
