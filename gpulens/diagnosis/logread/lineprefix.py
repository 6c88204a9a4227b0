"""Prefixes a tool wrote before every line of the error context, removed before the classifier
reads it: Ray's worker and daemon prefixes, and the prefix read off a traceback's header line (a
timestamp, a logger's fields, a container's or a host's name, a colour code); and a launcher's rank prefix on
one line (:func:`prefix_free`, :func:`process_key`)."""

from __future__ import annotations

import re
from collections.abc import Sequence

from gpulens.diagnosis.logread.ranks import RAY_PREFIX, prefix_rank, strip_prefix
from gpulens.diagnosis.logread.tracebacks import TRACEBACK, has_head

__all__ = ["prefix_free", "process_key", "ray_free", "strip_line_prefixes", "strip_ray_prefixes"]


def strip_ray_prefixes(context: Sequence[str]) -> list[str]:
    """``context`` with Ray's line prefixes removed (the indentation after them kept), so that a
    worker's traceback reads as one: the classifier's reading of the other launchers' prefixes."""
    if not any("pid=" in ln or "(raylet)" in ln for ln in context):
        return list(context)
    return [RAY_PREFIX.sub("", ln, count=1) if "(" in ln[:40] else ln for ln in context]


def ray_free(line: str) -> str:
    """One line without Ray's process prefix."""
    return strip_ray_prefixes([line])[0]


#: The longest per-line prefix read off a traceback's header line (a timestamp, a logger's
#: fields, a container or host name, a colour code).
_MAX_PREFIX = 100
_DIGITS = re.compile(r"\d+")


def strip_line_prefixes(context: Sequence[str]) -> list[str]:
    """``context`` with the prefix that a tool wrote before every line of a traceback removed
    (a log shipper's or ``ts``'s timestamp, a logger's fields, docker compose's "trainer-1  | ",
    journald's "May 01 10:00:00 host python[42]: ", pdsh's "node-a17: ", a colour code): the
    text before a traceback header is that prefix, and the lines from the header on that start
    with the same text (its numbers may differ: a timestamp) lose it, so the exception line
    reads as Python printed it. Prefixes the reader already knows (ranks, Ray) are gone by now."""
    heads = [i for i, ln in enumerate(context) if has_head(ln)]
    if not heads:
        return list(context)
    out = list(context)
    for h in heads:
        at = out[h].find(TRACEBACK)
        prefix = out[h][:at]
        if not prefix.strip() or at > _MAX_PREFIX:
            continue
        shape = _prefix_shape(prefix)
        for k in range(h, len(out)):
            m = shape.match(out[k])
            if m is not None:
                out[k] = out[k][m.end():]
    return out


def _prefix_shape(prefix: str) -> re.Pattern[str]:
    """A pattern of lines that start with ``prefix``, its numbers and its leading and inner runs
    of blanks free to differ (a timestamp, "trainer-1  | " and "trainer-10 | ", " 3: " and
    "13: "), its trailing blanks not (the indentation of a traceback's frames after it is kept)."""
    body = prefix.rstrip(" \t")
    parts = [_DIGITS.sub(r"\\d+", re.escape(x)) for x in re.split(r"[ \t]+", body)]
    lead = r"[ \t]*" if not parts[0] else ""  # padding before a number (" 3: " and "13: ")
    return re.compile(lead + r"[ \t]+".join(x for x in parts if x) + re.escape(prefix[len(body):]))


def prefix_free(line: str) -> str:
    """``line`` without a launcher's rank prefix (``[rank3]:``), which keeps the indentation."""
    return strip_prefix(line) if line[:1] in "[0123456789" else line


def process_key(line: str) -> str | None:
    """The process a launcher's prefix says printed a line (Ray's ``(name pid=N)``, torchrun's
    ``[rankN]:``, srun's ``N:``, Open MPI's ``[1,N]<stderr>:``); None without a prefix (the
    driver's or a single process's own line)."""
    if "pid=" in line[:120]:
        m = RAY_PREFIX.match(line)
        if m and m.group(1):
            return "pid" + m.group(1)
    rank = prefix_rank(line)
    return None if rank is None else f"rank{rank}"
