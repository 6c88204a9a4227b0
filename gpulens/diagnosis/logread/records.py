"""A logging record's header and the level it names, in the formats the reader meets: glog's and
abseil's ("W0113 22:44:54.202000 3923616 convert_frame.py:1125] "), vLLM's ("WARNING 08-25
18:56:06 [core.py:700] "), TensorFlow's ("W tensorflow/core/framework/op_kernel.cc:1763] " once
its date is normalized away) and Python logging's commonest level fields ("ERROR:root:",
"[WARNING|trainer.py:123]", loguru's "| ERROR    |"). The reader's one test of "is this record
logged at warning level" is :func:`warning_head`; a warning word anywhere in a line (the benign
patterns of :mod:`lines`) is another question, of what a line says, not of its header.
"""

from __future__ import annotations

import re

__all__ = ["glog_info", "glued_record", "logger_head", "names_level", "tf_notice", "unlogged", "warning_head"]

#: A logger's header on every line of a traceback it prints: vLLM's "ERROR 08-25 18:56:06
#: [core.py:700] " (vllm/logger.py _FORMAT "%(levelname)s %(asctime)s [%(filename)s:%(lineno)d]
#: %(message)s"), glog's (torchrun's, torch's C++ and torch._logging's Python records, whose first
#: letter is the level; torch/_logging/_internal.py TorchLogsFormatter) "E0119 09:59:04.513000 4928
#: api.py:874] ". Groups ``word`` and ``letter``: the level as it is written.
_LOGGER_HEAD = re.compile(r"^(?:(?P<word>ERROR|WARNING|CRITICAL|INFO) [\d-]+ [\d:.,]+ \[[\w./-]+:\d+\]"
                          r"|(?P<letter>[EWFI])\d{4} [\d:.]+ +\d+ [\w./-]+:\d+\]) ")
#: A logging record's level as the commonest formats print it, at the start of the line: logging's
#: "%(levelname)s:%(name)s:%(message)s" (basicConfig's default) and "... - %(levelname)s - ...",
#: a bracketed "[ERROR]" (axolotl's "[%(asctime)s] [%(levelname)s] [%(name)s...] ", transformers'
#: "[WARNING|trainer.py:123]"), loguru's "| ERROR    |" (CPython Lib/logging/__init__.py, loguru/_defaults.py).
_RECORD_LEVEL = re.compile(r"^.{0,60}?(?:\[|\| |- |^)(?:ERROR|WARNING|CRITICAL)(?:\]|\||:[\w.]*:| +[-|] )")
#: TensorFlow's own log line at INFO or WARNING severity, as normalized (its date and time gone):
#: "2023-07-03 10:14:18.124573: W tensorflow/core/framework/op_kernel.cc:1763] OP_REQUIRES failed at
#: ..." (tensorflow/core/platform/default/logging.cc, LogMessage::GenerateLogMessage: "%s.%06d: %c
#: %s:%d] %s" with the severity's letter of "IWEF"): a warning printed before the failure (rule R2),
#: whose error, if any, Python raises below it.
_TF_NOTICE = re.compile(r"^:?[ \t]*[IW] [\w./-]+:\d+\] ")
#: The header of a record at INFO level in glog's and abseil's format (level letter, month and day, time,
#: thread id, file:line; abseil-py absl/logging/__init__.py ``get_absl_log_prefix``, google/glog
#: src/logging.cc): "I0519 00:50:42.634950 139913184905024 xla_bridge.py:863] ". What such a record says
#: failed was logged as information: the program went on (JAX's "Unable to initialize backend 'tpu': ...
#: Failed to open libtpu.so" while it looks for its platforms). Stricter than :data:`_LOGGER_HEAD`'s glog
#: branch (a full time, no "/" in the file name) as it answered before the two met here.
_INFO_RECORD = re.compile(r"I\d{4} \d\d:\d\d:\d\d(?:\.\d+)?\s+\d+ [\w.-]+:\d+\] ")
#: A logging record of a warning or an error written on the line of a tqdm bar that had not
#: ended its line (tqdm redraws with "\r" and writes no newline until it closes): the bar's
#: closing "]" then Python logging's default asctime ("2024-04-24 15:46:03,689", logging
#: Formatter.default_time_format + ",%03d") and the level name.
_GLUED_RECORD = re.compile(r"\]\s*\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d[,.]\d{3}\s*(?:\[|- |\| )?(?:WARNING|ERROR|CRITICAL|FATAL)\b")


def logger_head(body: str) -> re.Match[str] | None:
    """The vLLM or glog header a logger prints on every line of a record (:data:`_LOGGER_HEAD`), if any."""
    return _LOGGER_HEAD.match(body)


def warning_head(body: str) -> int | None:
    """Where the message of a record logged at warning level under a vLLM or glog header starts
    ("WARNING 08-25 18:56:06 [core.py:700] ", "W0113 22:44:54.202000 3923616 x.py:1125] "); None
    for another level or no such header. Not :func:`steplines.warns` (any warning's words) nor
    phase.text's warning head (Python's ``formatwarning`` line): those ask whether a line warns."""
    m = _LOGGER_HEAD.match(body) if body[:1] == "W" else None
    if m is None or not (m.group("word") == "WARNING" or m.group("letter") == "W"):
        return None
    return m.end()


def names_level(text: str) -> bool:
    """Whether a line starts with a logging record's ERROR, WARNING or CRITICAL level field
    (:data:`_RECORD_LEVEL`): a logger's record, as ``logger.exception`` writes above a traceback."""
    return _RECORD_LEVEL.match(text) is not None


def tf_notice(norm: str) -> bool:
    """Whether a normalized line is TensorFlow's own log line at INFO or WARNING severity."""
    return norm[:4].lstrip(": \t")[:2] in ("W ", "I ") and _TF_NOTICE.match(norm) is not None


def glog_info(shown: str) -> bool:
    """Whether a raw line starts with a glog/abseil header at INFO level (:data:`_INFO_RECORD`)."""
    return shown[:1] == "I" and _INFO_RECORD.match(shown) is not None


def unlogged(body: str) -> str:
    """``body`` without the header a logger prints on every line of a traceback it logs (vLLM's
    "ERROR 08-10 20:45:59 [registry.py:355] ", glog's "E0119 09:59:04.513000 4928 api.py:874] ";
    :func:`logger_head`)."""
    m = logger_head(body) if "] " in body[:120] else None
    return body if m is None else body[m.end():]


def glued_record(end: str) -> bool:
    """Whether a progress bar's last refresh ``end`` has a logging record at warning level or above written
    onto it (:data:`_GLUED_RECORD`)."""
    return "]" in end and _GLUED_RECORD.search(end) is not None
